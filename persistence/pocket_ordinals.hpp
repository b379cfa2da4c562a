// SPDX-License-Identifier: Apache-2.0
// The pocket columns (chats.pockets, reservations.held, ledger.charged, ...)
// are integer arrays indexed by a pocket ordinal that the catalog_pockets
// table gives each pocket name once and for ever
// (migrations/003_release_0_2.sql; daily_messages 1, daily_images 2, balance
// 3); a NULL element is a pocket not listed. This is the translation between
// those arrays and the names everything else uses.
#pragma once

#include "protocol/catalog.hpp"
#include "protocol/types.hpp"

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include <chrono>
#include <exception>
#include <map>
#include <string>
#include <vector>

namespace chargeonce::persistence {

class pocket_ordinals {
public:
  /// Knows no pocket; `dsn` (may be empty) is where an ordinal it does not
  /// know is looked up again: another server may have registered it since.
  explicit pocket_ordinals(std::string dsn = {});

  /// The built-in pockets' ordinals, which migrations/003_release_0_2.sql fixes
  /// in every database (daily_messages 1, daily_images 2, balance 3): for
  /// SQL that knows only the built-in catalog.
  static pocket_ordinals builtin();

  /// Reads every ordinal of catalog_pockets.
  void load(pqxx::transaction_base& tx);

  /// Registers the pockets of `products` that catalog_pockets lacks (the
  /// next ordinals, under the table's lock: servers starting together take
  /// turns), then load(). Without a missing pocket, one SELECT.
  void register_catalog(pqxx::connection_base& conn, const catalog& products);

  /// The ordinal of `name`; a name not registered is a bug (the catalog's
  /// pockets are registered before any operation): broken_invariant.
  int ordinal(const std::string& name) const;

  /// An array's text ("{NULL,1}") or a JSON array ([null, 1]) as pockets:
  /// the listed elements, zeros included. Written by chargeonce's own SQL:
  /// anything else is a bug (broken_invariant, or nlohmann's exceptions).
  pockets read(const char* text);
  pockets read(const nlohmann::json& array);

  /// The array text of `x`, for a `$n::integer[]` parameter.
  std::string text(const pockets& x) const;

private:
  /// The name of `ordinal`, looked up again once when it is not known; a
  /// lookup that failed is rethrown, not tried again, for a second.
  const std::string& name(int ordinal);

  std::string dsn_;
  /// Why the last lookup failed, and until when no other is tried: the
  /// rows of one batch must not each open a connection during an outage.
  std::exception_ptr lookup_failure_;
  std::chrono::steady_clock::time_point next_lookup_{};
  std::vector<std::string> names_; // index: ordinal - 1; "" for a gap
  std::map<std::string, int, std::less<>> ordinals_;
};

/// The catalog in the compact form the batch function and chargeonce_choose
/// read (its last parameter): per kind its pay list as [[ordinal, price],
/// ...], queues, premium-free flag and refusal.
std::string catalog_text(const catalog& products,
                         const pocket_ordinals& ordinals);

} // namespace chargeonce::persistence
