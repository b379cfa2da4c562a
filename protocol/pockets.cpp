// SPDX-License-Identifier: Apache-2.0
#include "protocol/pockets.hpp"

#include <algorithm>

namespace chargeonce {

std::string queue_for(const kind_spec& spec, bool premium) {
  return premium ? spec.priority_queue : spec.queue;
}

std::string queue_for(const kind& k, bool premium) {
  std::string queue = to_string(k);
  queue += "_generation";
  if (premium)
    queue += "_priority";
  return queue;
}

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

std::string cannot_pay_message(chat_id chat, const kind_spec& spec) {
  return "chat " + std::to_string(chat) + " cannot pay for " + spec.name
         + cannot_pay_detail(spec);
}

pockets take_clamped(pockets& amounts, const pockets& held) {
  pockets charged;
  for (const auto& [name, amount] : held.items())
    charged.set(name, std::min(amount, amounts.get(name)));
  amounts -= charged;
  return charged;
}

pockets captured(const pockets& held, const pockets& held_units,
                 int32_t held_total, int32_t units) {
  if (units <= 0 || units >= held_total)
    return held;
  // items() is sorted by name: the daily pockets in that order, then the
  // purchased one, which never expires.
  std::vector<pockets::value_type> order;
  for (const auto& item : held_units.items())
    if (item.first != pocket::balance)
      order.push_back(item);
  if (auto n = held_units.get(pocket::balance); n > 0)
    order.emplace_back(pocket::balance, n);
  pockets out;
  int32_t left = units;
  for (const auto& [name, n] : order) {
    auto take = std::min(left, n);
    if (n > 0 && take > 0)
      out.set(name, held.get(name) / n * take);
    left -= take;
  }
  return out;
}

pockets without_zeros(const pockets& x) {
  pockets out;
  for (const auto& [name, amount] : x.items())
    if (amount != 0)
      out.set(name, amount);
  return out;
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
