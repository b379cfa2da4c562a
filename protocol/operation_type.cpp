// SPDX-License-Identifier: Apache-2.0
#include "protocol/operation_type.hpp"

namespace chargeonce {

const char* to_string(operation_type x) {
  return is_operation_type(x) ? traits_of(x).name : "unknown";
}

bool is_valid(operation_type x) {
  return is_operation_type(x) && traits_of(x).batchable;
}

bool is_gateway_operation(operation_type x) {
  return is_operation_type(x) && traits_of(x).role == operation_role::gateway;
}

} // namespace chargeonce
