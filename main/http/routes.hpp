// SPDX-License-Identifier: Apache-2.0
// The HTTP adapter's one route table, its matcher and its bearer-token check.
// docs/openapi.yaml documents exactly these routes (tests/http/http.sh
// compares them with the output of test_http_routes).
#pragma once

#include "main/http/context.hpp"

#include <vector>

namespace chargeonce::http {

using handler = void (*)(exchange&);

/// One endpoint: method, OpenAPI path template (`{name}` is one path
/// segment), the role whose token it needs, and what answers it.
struct route {
  const char* method;
  const char* path;
  role who;
  handler handle;
};

/// Every route, in the order of docs/openapi.yaml.
const std::vector<route>& routes();

/// Finds the route, checks the token, runs the handler; answers 404
/// (no_route), 405 (method_not_allowed, with Allow), 401 or 403 itself.
void dispatch(backend& be, const httplib::Request& req, const std::string& body,
              httplib::Response& res);

} // namespace chargeonce::http
