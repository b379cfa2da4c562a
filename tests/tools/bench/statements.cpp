// SPDX-License-Identifier: Apache-2.0
// A statement's text as --statements reports it: on one line, cut to a
// limit, never inside a character.
#include "tools/bench/statements.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace chargeonce::bench;

TEST_SUITE("main.bench_statements") {

  TEST_CASE("a statement's text comes on one line, each run of white space "
            "one blank") {
    CHECK(one_line("  SELECT a,\n\t  b\r\n  FROM t  \n", 80)
          == "SELECT a, b FROM t");
    CHECK(one_line("", 80).empty());
    CHECK(one_line(" \n ", 80).empty());
  }

  TEST_CASE("a long text is cut to the limit and ends in an ellipsis") {
    std::string text(100, 'x');
    auto out = one_line(text, 80);
    CHECK(out.size() == 80);
    CHECK(out.substr(77) == "...");
    CHECK(one_line(std::string(80, 'y'), 80) == std::string(80, 'y'));
  }

  TEST_CASE("the cut never splits a UTF-8 character") {
    // "é" is two bytes; the 77th and 78th bytes are one character.
    auto text = std::string(76, 'a') + "\xc3\xa9" + std::string(10, 'b');
    auto out = one_line(text, 80);
    CHECK(out == std::string(76, 'a') + "...");
  }
}
