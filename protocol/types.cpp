// SPDX-License-Identifier: Apache-2.0
#include "protocol/types.hpp"

#include <array>
#include <utility>

namespace chargeonce {

const char* to_string(kind x) {
  return x == kind::image ? "image" : "text";
}

namespace {

constexpr std::array<std::pair<reservation_status, const char*>, 6>
  status_names{{{reservation_status::queued, "queued"},
                {reservation_status::in_progress, "in_progress"},
                {reservation_status::committed, "committed"},
                {reservation_status::failed, "failed"},
                {reservation_status::cancelled, "cancelled"},
                {reservation_status::released, "released"}}};

} // namespace

const char* to_string(reservation_status x) {
  for (const auto& [status, name] : status_names)
    if (status == x)
      return name;
  return "queued";
}

bool is_active(reservation_status x) {
  return x == reservation_status::queued
         || x == reservation_status::in_progress;
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
  for (const auto& [status, name] : status_names)
    if (text == name) {
      out = status;
      return true;
    }
  return false;
}

bool is_valid(kind x) {
  return x == kind::text || x == kind::image;
}

} // namespace chargeonce
