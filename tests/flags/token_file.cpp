// SPDX-License-Identifier: Apache-2.0
// A token file gives its first line without trailing whitespace (an editor's
// newline or a CR is not part of the secret); a missing file is an error
// naming it. The server's http-*-token-file options and chargeonce-bench's
// share this reader.
#include "main/flags/token_file.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace chargeonce;

namespace {

std::string temp_file(const std::string& content) {
  std::string path = "token_file_test.XXXXXX";
  // mkstemp: a name no other run of this test uses.
  int fd = mkstemp(path.data());
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream{path} << content;
  return path;
}

} // namespace

TEST_CASE("a token file gives its first line without trailing whitespace") {
  auto path = temp_file("secret-token-of-the-gateway \r\nsecond line\n");
  std::string token;
  CHECK(read_token_file(path, token).empty());
  CHECK(token == "secret-token-of-the-gateway");
  std::remove(path.c_str());
}

TEST_CASE("an empty token file gives an empty token, not an error") {
  auto path = temp_file("");
  std::string token = "left over";
  CHECK(read_token_file(path, token).empty());
  CHECK(token.empty());
  std::remove(path.c_str());
}

TEST_CASE("a missing token file is an error naming it") {
  std::string token;
  CHECK(read_token_file("/nonexistent/token", token)
        == "cannot read /nonexistent/token");
}
