// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/bench.hpp"

int main(int argc, char** argv) {
  return chargeonce::run_bench(argc, argv);
}
