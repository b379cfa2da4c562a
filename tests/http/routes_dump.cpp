// SPDX-License-Identifier: Apache-2.0
// Prints the HTTP adapter's route table, one `METHOD PATH ROLE` per line, so
// that tests/http/http.sh can compare it with docs/openapi.yaml.
#include "main/http/routes.hpp"

#include <iostream>

int main() {
  for (const auto& x : chargeonce::http::routes())
    std::cout << x.method << ' ' << x.path << ' '
              << chargeonce::http::to_string(x.who) << '\n';
}
