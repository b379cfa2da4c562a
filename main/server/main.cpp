// SPDX-License-Identifier: Apache-2.0
#include "main/server/server.hpp"

int main(int argc, char** argv) {
  return chargeonce::run_server(argc, argv);
}
