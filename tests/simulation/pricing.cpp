// SPDX-License-Identifier: Apache-2.0
#include "tests/simulation/pricing.hpp"

#include "protocol/pockets.hpp"
#include "tools/common/pocket_model.hpp"

#include <algorithm>

namespace chargeonce::test {

namespace {

const catalog& builtin() {
  static const catalog c = builtin_catalog({});
  return c;
}

} // namespace

ec choose_pockets(const kind_spec& spec, bool premium, const pockets& available,
                  int32_t units, pocket_choice& out) {
  out = pocket_choice{{}, {}, queue_for(spec, premium)};
  if (premium && spec.premium_free)
    return ec::none;
  int32_t left = std::max(units, 1);
  for (const auto& source : spec.pay_from) {
    if (left == 0)
      break;
    // At most what the pocket covers: never more than it holds. A kind
    // lists each pocket once (validate refuses a catalog that does not).
    auto covered = std::max(0, available.get(source.pocket)) / source.price;
    auto take = std::min(left, covered);
    if (take == 0)
      continue;
    out.held.set(source.pocket, take * source.price);
    out.held_units.set(source.pocket, take);
    left -= take;
  }
  if (left == 0)
    return ec::none;
  out.held = {};
  out.held_units = {};
  return insufficient_for(kind{spec.name});
}

ec choose_pockets(const kind_spec& spec, bool premium, const pockets& available,
                  pocket_choice& out) {
  return choose_pockets(spec, premium, available, 1, out);
}

ec choose_pockets(const kind& k, bool premium, const pockets& available,
                  pocket_choice& out) {
  const auto* spec = builtin().find_kind(to_string(k));
  if (spec == nullptr) {
    out = pocket_choice{};
    return ec::invalid_argument;
  }
  return choose_pockets(*spec, premium, available, out);
}

} // namespace chargeonce::test
