// SPDX-License-Identifier: Apache-2.0
#include "main/cli/cli.hpp"

int main(int argc, char** argv) {
  return chargeonce::run_cli(argc, argv);
}
