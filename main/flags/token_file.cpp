// SPDX-License-Identifier: Apache-2.0
#include "main/flags/token_file.hpp"

#include <cctype>
#include <fstream>

namespace chargeonce {

std::string read_token_file(const std::string& path, std::string& token) {
  std::ifstream in{path};
  if (!in)
    return "cannot read " + path;
  std::getline(in, token);
  while (!token.empty()
         && std::isspace(static_cast<unsigned char>(token.back())))
    token.pop_back();
  return {};
}

} // namespace chargeonce
