// SPDX-License-Identifier: Apache-2.0
// The kinds a server's catalog has had (the catalog_kinds table): a server
// must not start with a catalog that drops a kind whose jobs or charges are
// still in the database.
#pragma once

#include "protocol/catalog.hpp"

#include <caf/error.hpp>

#include <string>

namespace chargeonce::persistence {

/// Records the kinds of `products` in catalog_kinds and forgets the
/// recorded ones it no longer has, in one transaction. A dropped kind
/// that still has active reservations or ledger rows is refused, changing
/// nothing: ec::invalid_argument, naming each such kind with its counts.
/// As classify() says when Postgres fails (storage_unavailable).
caf::error record_catalog_kinds(const std::string& dsn,
                                const catalog& products);

} // namespace chargeonce::persistence
