// SPDX-License-Identifier: Apache-2.0
#include "protocol/batch.hpp"

namespace chargeonce {

const char* to_string(operation_type x) {
  switch (x) {
  case operation_type::touch:
    return "touch";
  case operation_type::reserve:
    return "reserve";
  case operation_type::cancel:
    return "cancel";
  case operation_type::status:
    return "status";
  case operation_type::start:
    return "start";
  case operation_type::heartbeat:
    return "heartbeat";
  case operation_type::commit:
    return "commit";
  case operation_type::fail:
    return "fail";
  }
  return "unknown";
}

bool is_valid(operation_type x) {
  return static_cast<uint8_t>(x) <= static_cast<uint8_t>(operation_type::fail);
}

bool is_gateway_operation(operation_type x) {
  return x == operation_type::touch || x == operation_type::reserve
         || x == operation_type::cancel || x == operation_type::status;
}

} // namespace chargeonce
