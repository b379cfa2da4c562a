// SPDX-License-Identifier: Apache-2.0
#include "protocol/pockets.hpp"

#include <algorithm>

namespace chargeonce {

ec insufficient_for(const kind& k) {
  if (k == kind::text)
    return ec::insufficient_messages;
  if (k == kind::image)
    return ec::insufficient_images;
  return ec::insufficient_funds;
}

std::string cannot_pay_detail(const kind_spec& spec) {
  // The built-in kinds' messages stay as they were before the catalog.
  if (spec.name == "text" || spec.name == "image")
    return {};
  std::string out = " (";
  for (size_t i = 0; i < spec.pay_from.size(); ++i)
    out += (i == 0 ? "" : ", ") + spec.pay_from[i].pocket + ": "
           + std::to_string(spec.pay_from[i].price);
  return out + " each)";
}

pockets in_window(const pockets& x, int64_t taken_in, int64_t window) {
  if (taken_in == window)
    return x;
  pockets out;
  if (auto amount = x.get(pocket::balance); amount != 0)
    out.set(pocket::balance, amount);
  return out;
}

pockets held_by(const std::vector<reservation>& holding, int64_t window) {
  pockets out;
  for (const auto& r : holding)
    out += in_window(r.held, r.window, window);
  return out;
}

pockets left_after(const pockets& amounts, const pockets& held) {
  pockets out;
  for (const auto& [name, amount] : amounts.items())
    out.set(name, std::max(0, amount - held.get(name)));
  return out;
}

pockets spendable(const chat_status& x) {
  return left_after(x.amounts, x.held);
}

} // namespace chargeonce
