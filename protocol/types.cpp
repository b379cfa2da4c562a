// SPDX-License-Identifier: Apache-2.0
#include "protocol/types.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace chargeonce {

const std::string& to_string(const kind& x) {
  return x.name();
}

namespace {

constexpr std::array<std::pair<reservation_status, const char*>, 7>
  status_names{{{reservation_status::queued, "queued"},
                {reservation_status::in_progress, "in_progress"},
                {reservation_status::committed, "committed"},
                {reservation_status::failed, "failed"},
                {reservation_status::cancelled, "cancelled"},
                {reservation_status::released, "released"},
                {reservation_status::outcome_unknown, "outcome_unknown"}}};

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

bool is_catalog_name(const std::string& text) {
  auto lower = [](char c) {
    return c >= 'a' && c <= 'z';
  };
  auto digit = [](char c) {
    return c >= '0' && c <= '9';
  };
  return !text.empty() && text.size() <= 32 && lower(text[0])
         && std::all_of(text.begin(), text.end(), [&](char c) {
              return lower(c) || digit(c) || c == '_';
            });
}

bool from_string(const std::string& text, kind& out) {
  if (!is_catalog_name(text))
    return false;
  out = kind{text};
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

bool is_valid(const kind& x) {
  return is_catalog_name(x.name());
}

pockets::pockets(int32_t daily_messages, int32_t daily_images,
                 int32_t balance) {
  set(pocket::daily_messages, daily_messages);
  set(pocket::daily_images, daily_images);
  set(pocket::balance, balance);
}

namespace {

/// Where `name` is or would be in the sorted items.
template <class Items>
auto position(Items& items, const std::string& name) {
  return std::lower_bound(
    items.begin(), items.end(), name,
    [](const pockets::value_type& item, const std::string& key) {
      return item.first < key;
    });
}

} // namespace

int32_t pockets::get(const std::string& name) const {
  auto i = position(items_, name);
  return i != items_.end() && i->first == name ? i->second : 0;
}

void pockets::set(const std::string& name, int32_t amount) {
  auto i = position(items_, name);
  if (i != items_.end() && i->first == name)
    i->second = amount;
  else
    items_.insert(i, {name, amount});
}

void pockets::add(const std::string& name, int32_t amount) {
  set(name, get(name) + amount);
}

pockets& pockets::operator+=(const pockets& x) {
  for (const auto& [name, amount] : x.items_)
    add(name, amount);
  return *this;
}

pockets& pockets::operator-=(const pockets& x) {
  for (const auto& [name, amount] : x.items_)
    add(name, -amount);
  return *this;
}

bool pockets::any_negative() const {
  return std::any_of(items_.begin(), items_.end(),
                     [](const value_type& item) { return item.second < 0; });
}

bool pockets::within(const pockets& most) const {
  return std::all_of(items_.begin(), items_.end(), [&](const value_type& item) {
    return item.second <= most.get(item.first);
  });
}

bool pockets::well_formed() const {
  return std::adjacent_find(items_.begin(), items_.end(),
                            [](const value_type& a, const value_type& b) {
                              return a.first >= b.first;
                            })
         == items_.end();
}

bool operator==(const pockets& x, const pockets& y) {
  auto listed_equal = [](const pockets& a, const pockets& b) {
    return std::all_of(a.items_.begin(), a.items_.end(),
                       [&](const pockets::value_type& item) {
                         return b.get(item.first) == item.second;
                       });
  };
  return listed_equal(x, y) && listed_equal(y, x);
}

} // namespace chargeonce
