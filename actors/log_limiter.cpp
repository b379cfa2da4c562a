// SPDX-License-Identifier: Apache-2.0
#include "actors/log_limiter.hpp"

#include <algorithm>
#include <iterator>

namespace chargeonce {

namespace {

bool continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

bool control(char c) {
  auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7F;
}

} // namespace

std::string log_excerpt(std::string_view text, size_t bytes_max) {
  auto cut = std::min(text.size(), bytes_max);
  // A cut inside a multi-byte character would leave invalid UTF-8.
  if (cut < text.size())
    while (cut > 0 && continuation_byte(text[cut]))
      --cut;
  std::string out;
  out.reserve(cut + 32);
  static constexpr char hex[] = "0123456789abcdef";
  for (char c : text.substr(0, cut)) {
    if (!control(c)) {
      out += c;
      continue;
    }
    auto u = static_cast<unsigned char>(c);
    out += "\\x";
    out += hex[u >> 4];
    out += hex[u & 0xF];
  }
  if (cut < text.size())
    out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

log_limiter::verdict log_limiter::admit(const std::string& peer,
                                        clock::time_point now) {
  auto& e = entry_of(peer, now);
  verdict out;
  if (now - e.window_start >= limits_.window) {
    out.suppressed = e.suppressed;
    e = entry{now, 0, 0};
  }
  if (e.lines < limits_.lines_per_window_max) {
    ++e.lines;
    out.log = true;
  } else {
    ++e.suppressed;
  }
  return out;
}

log_limiter::entry& log_limiter::entry_of(const std::string& peer,
                                          clock::time_point now) {
  if (auto i = entries_.find(peer); i != entries_.end())
    return i->second;
  auto tracked = [this] {
    return entries_.size() - entries_.count(other_peers);
  };
  if (tracked() >= limits_.peers_max) {
    // Peers whose window is over and who owe no report are as good as new.
    for (auto i = entries_.begin(); i != entries_.end();) {
      auto done = i->first != other_peers && i->second.suppressed == 0
                  && now - i->second.window_start >= limits_.window;
      i = done ? entries_.erase(i) : std::next(i);
    }
  }
  const auto& key = tracked() < limits_.peers_max ? peer : other_peers;
  return entries_.try_emplace(key, entry{now, 0, 0}).first->second;
}

std::vector<std::pair<std::string, uint64_t>> log_limiter::take_suppressed() {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [peer, e] : entries_)
    if (e.suppressed > 0) {
      out.emplace_back(peer, e.suppressed);
      e.suppressed = 0;
    }
  return out;
}

} // namespace chargeonce
