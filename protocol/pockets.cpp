// SPDX-License-Identifier: Apache-2.0
#include "protocol/pockets.hpp"

#include <algorithm>

namespace chargeonce {

std::string queue_for(kind k, bool premium) {
  std::string queue = to_string(k);
  queue += "_generation";
  if (premium)
    queue += "_priority";
  return queue;
}

ec choose_pockets(kind k, bool premium, const pockets& available,
                  pocket_choice& out) {
  out = pocket_choice{{}, queue_for(k, premium)};
  if (k == kind::text) {
    if (premium)
      return ec::none;
    if (available.daily_messages <= 0)
      return ec::insufficient_messages;
    out.held.daily_messages = 1;
    return ec::none;
  }
  if (available.daily_images > 0) {
    out.held.daily_images = 1;
    return ec::none;
  }
  if (available.balance > 0) {
    out.held.balance = 1;
    return ec::none;
  }
  return ec::insufficient_images;
}

pockets held_by(const std::vector<reservation>& active) {
  pockets out;
  for (const auto& r : active) {
    out.daily_messages += r.held.daily_messages;
    out.daily_images += r.held.daily_images;
    out.balance += r.held.balance;
  }
  return out;
}

pockets left_after(const pockets& amounts, const pockets& held) {
  return {std::max(0, amounts.daily_messages - held.daily_messages),
          std::max(0, amounts.daily_images - held.daily_images),
          std::max(0, amounts.balance - held.balance)};
}

pockets spendable(const chat_status& x) {
  return left_after(x.amounts, x.held);
}

} // namespace chargeonce
