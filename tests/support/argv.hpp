// SPDX-License-Identifier: Apache-2.0
// A command line for tests that call a program's parser in-process.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace chargeonce::test {

/// argv for `args`, with `program` in front; owns the strings it points to.
struct argv_of {
  explicit argv_of(std::vector<std::string> args,
                   const std::string& program = "program")
      : text(std::move(args)) {
    text.insert(text.begin(), program);
    ptrs.reserve(text.size() + 1);
    for (auto& x : text)
      ptrs.push_back(x.data());
    ptrs.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(text.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> text;
  std::vector<char*> ptrs;
};

} // namespace chargeonce::test
