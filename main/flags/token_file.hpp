// SPDX-License-Identifier: Apache-2.0
// A secret given as a file (a bearer token), so that it is not visible in
// `ps`: shared by chargeonce-server's http-*-token-file options and
// chargeonce-bench's.
#pragma once

#include <string>

namespace chargeonce {

/// Sets `token` to the first line of `path` without trailing whitespace;
/// returns "" or what went wrong ("cannot read PATH").
std::string read_token_file(const std::string& path, std::string& token);

} // namespace chargeonce
