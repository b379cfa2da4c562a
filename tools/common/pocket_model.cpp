// SPDX-License-Identifier: Apache-2.0
#include "tools/common/pocket_model.hpp"

#include <algorithm>
#include <vector>

namespace chargeonce {

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

std::string queue_for(const kind_spec& spec, bool premium) {
  return premium ? spec.priority_queue : spec.queue;
}

} // namespace chargeonce
