// SPDX-License-Identifier: Apache-2.0
#include "protocol/types.hpp"

namespace chargeonce {

const char* to_string(kind x) {
  return x == kind::image ? "image" : "text";
}

const char* to_string(reservation_status x) {
  return x == reservation_status::in_progress ? "in_progress" : "queued";
}

bool from_string(const std::string& text, kind& out) {
  if (text == "text")
    out = kind::text;
  else if (text == "image")
    out = kind::image;
  else
    return false;
  return true;
}

bool from_string(const std::string& text, reservation_status& out) {
  if (text == "queued")
    out = reservation_status::queued;
  else if (text == "in_progress")
    out = reservation_status::in_progress;
  else
    return false;
  return true;
}

bool is_valid(kind x) {
  return x == kind::text || x == kind::image;
}

} // namespace chargeonce
