// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/chaos.hpp"

int main(int argc, char** argv) {
  return chargeonce::run_chaos(argc, argv);
}
