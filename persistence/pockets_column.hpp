// SPDX-License-Identifier: Apache-2.0
// Pockets as the jsonb columns hold them (chats.pockets, reservations.held,
// ledger.charged): {"name": amount, ...}, a pocket not listed holding 0;
// and the catalog as the batch functions take it.
#pragma once

#include "protocol/catalog.hpp"
#include "protocol/types.hpp"

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include <string>

namespace chargeonce::persistence {

/// Written by chargeonce's own SQL: anything else is a bug, and nlohmann's
/// exceptions are classified as one.
pockets pockets_of(const nlohmann::json& j);
pockets pockets_of(const pqxx::field& f);

/// The jsonb text of `x`.
std::string pockets_text(const pockets& x);

/// The catalog in the compact form of 004_catalog.sql's functions (the
/// last parameter of chargeonce_apply_batch).
std::string catalog_text(const catalog& products);

} // namespace chargeonce::persistence
