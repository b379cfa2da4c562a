// SPDX-License-Identifier: Apache-2.0
#include "client/routing.hpp"

#include "protocol/errors.hpp"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <set>

namespace chargeonce::client {

std::string endpoint::label() const {
  auto h = host.find(':') == std::string::npos ? host : "[" + host + "]";
  return h + ":" + std::to_string(port);
}

caf::expected<endpoint> parse_endpoint(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return caf::make_error(ec::invalid_argument,
                           "server must be HOST:PORT, got '" + text + "'");
  endpoint out{text.substr(0, colon), 0};
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']')
    out.host = out.host.substr(1, out.host.size() - 2);
  auto digits = text.substr(colon + 1);
  auto last = digits.data() + digits.size();
  auto res = std::from_chars(digits.data(), last, out.port);
  if (res.ec != std::errc{} || res.ptr != last || out.port == 0)
    return caf::make_error(ec::invalid_argument, "bad port in '" + text + "'");
  return out;
}

caf::expected<std::vector<endpoint>> parse_endpoints(const std::string& text) {
  std::vector<endpoint> out;
  std::set<std::string> seen;
  size_t begin = 0;
  while (begin <= text.size()) {
    auto end = text.find(',', begin);
    if (end == std::string::npos)
      end = text.size();
    auto one = parse_endpoint(text.substr(begin, end - begin));
    if (!one)
      return one.error();
    if (!seen.insert(one->label()).second)
      return caf::make_error(ec::invalid_argument,
                             "server " + one->label() + " listed twice");
    out.push_back(std::move(*one));
    begin = end + 1;
  }
  return out;
}

namespace {

/// FNV-1a over the bytes, then splitmix64's finalizer: cheap, stable, and
/// well mixed even for consecutive chat ids.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t fnv1a(const std::string& bytes, uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

} // namespace

uint64_t weight(const endpoint& server, chat_id chat) {
  return mix(fnv1a(server.label()) ^ mix(static_cast<uint64_t>(chat)));
}

std::vector<size_t> rank(const std::vector<endpoint>& servers, chat_id chat) {
  std::vector<size_t> order(servers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::vector<uint64_t> w(servers.size());
  for (size_t i = 0; i < servers.size(); ++i)
    w[i] = weight(servers[i], chat);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return w[a] != w[b] ? w[a] > w[b] : servers[a].label() < servers[b].label();
  });
  return order;
}

} // namespace chargeonce::client
