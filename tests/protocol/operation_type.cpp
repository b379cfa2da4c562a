// SPDX-License-Identifier: Apache-2.0
// One enum of operations end to end: the numbers a batch carries on the
// wire stay what they were, and the table answers what each operation is.
#include "protocol/operation_type.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

using namespace chargeonce;

namespace {

/// The operation a message of docs/clients.md's table starts with; none
/// for batch and for words that are not a message.
bool operation_of_message(const std::string& atom, operation_type& out) {
  static const std::map<std::string, operation_type> renamed{
    {"premium", operation_type::set_premium},
    {"flags", operation_type::set_flags},
    {"limits", operation_type::set_limits}};
  if (auto i = renamed.find(atom); i != renamed.end()) {
    out = i->second;
    return true;
  }
  for (const auto& t : operation_table)
    if (atom == t.name) {
      out = t.type;
      return true;
    }
  return false;
}

/// The error names each operation's rows of the table name, as a set.
std::map<operation_type, error_set> documented_errors() {
  std::ifstream in{CHARGEONCE_CLIENTS_DOC};
  REQUIRE(in);
  std::map<operation_type, error_set> out;
  std::string line;
  bool in_section = false;
  const std::regex quoted{"`([^`]*)`"};
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0)
      in_section = line == "## The messages";
    if (!in_section || line.rfind("| `", 0) != 0)
      continue;
    // | message | reply | errors |
    auto second = line.find(" | ", 2);
    auto last = line.rfind(" | ");
    REQUIRE(second != std::string::npos);
    auto message = line.substr(2, second - 2);
    auto refusals = line.substr(last + 3);
    error_set named = 0;
    for (std::sregex_iterator i{refusals.begin(), refusals.end(), quoted}, end;
         i != end; ++i)
      if (ec code; from_string((*i)[1].str(), code))
        named |= errors(code);
    for (std::sregex_iterator i{message.begin(), message.end(), quoted}, end;
         i != end; ++i) {
      auto atom = (*i)[1].str();
      atom = atom.substr(0, atom.find(','));
      if (operation_type x; operation_of_message(atom, x))
        out[x] |= named;
    }
  }
  return out;
}

} // namespace

TEST_SUITE("protocol.operation_type") {

  TEST_CASE("the operations of a batch keep the numbers they cross the "
            "network with") {
    CHECK(static_cast<int>(operation_type::touch) == 0);
    CHECK(static_cast<int>(operation_type::reserve) == 1);
    CHECK(static_cast<int>(operation_type::cancel) == 2);
    CHECK(static_cast<int>(operation_type::status) == 3);
    CHECK(static_cast<int>(operation_type::start) == 4);
    CHECK(static_cast<int>(operation_type::heartbeat) == 5);
    CHECK(static_cast<int>(operation_type::commit) == 6);
    CHECK(static_cast<int>(operation_type::fail) == 7);
  }

  TEST_CASE("a peer may send exactly the eight batch operations in a "
            "batch") {
    for (int i = 0; i < 256; ++i) {
      auto x = static_cast<operation_type>(i);
      CAPTURE(i);
      CHECK(is_valid(x) == (i <= 7));
    }
  }

  TEST_CASE("the gateway's batch operations are touch, reserve, cancel and "
            "status; the worker's start, heartbeat, commit and fail") {
    std::set<std::string> gateway;
    std::set<std::string> worker;
    for (const auto& t : operation_table)
      if (t.batchable)
        (is_gateway_operation(t.type) ? gateway : worker).insert(t.name);
    CHECK(gateway
          == std::set<std::string>{"cancel", "reserve", "status", "touch"});
    CHECK(worker
          == std::set<std::string>{"commit", "fail", "heartbeat", "start"});
  }

  TEST_CASE("every operation has one name, the metric label and the SQL "
            "batch's op text; a value that is none is unknown") {
    std::set<std::string> names;
    for (const auto& t : operation_table) {
      CHECK(to_string(t.type) == std::string{t.name});
      names.insert(t.name);
    }
    CHECK(names.size() == operation_type_count);
    CHECK(std::string{to_string(operation_type::top_up)} == "top_up");
    CHECK(std::string{to_string(operation_type::count_)} == "unknown");
    CHECK(std::string{to_string(static_cast<operation_type>(200))}
          == "unknown");
  }

  TEST_CASE("a persistence statement carries the batch operations but "
            "touch; only cancel and create are not retry-safe") {
    for (const auto& t : operation_table) {
      CAPTURE(t.name);
      CHECK(t.in_statement == (t.batchable && t.type != operation_type::touch));
      CHECK(t.retry_safe
            == (t.type != operation_type::cancel
                && t.type != operation_type::create));
    }
  }

  TEST_CASE("each operation may answer exactly the refusals docs/clients.md "
            "lists for its messages, besides what any operation may answer") {
    auto documented = documented_errors();
    for (const auto& t : operation_table) {
      std::string name = t.name;
      CAPTURE(name);
      REQUIRE(documented.count(t.type) == 1);
      CHECK((documented[t.type] & ~any_operation_errors) == t.refusals);
      CHECK((t.refusals & any_operation_errors) == 0);
    }
    CHECK(may_answer(operation_type::reserve, ec::busy));
    CHECK(may_answer(operation_type::touch, ec::storage_unavailable));
    CHECK_FALSE(may_answer(operation_type::status, ec::busy));
    CHECK_FALSE(may_answer(operation_type::cancel, ec::already_started));
  }
}
