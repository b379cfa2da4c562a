// SPDX-License-Identifier: Apache-2.0
#include "persistence/catalog_kinds.hpp"

#include "persistence/failure.hpp"
#include "protocol/errors.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include <vector>

namespace chargeonce::persistence {

namespace {

/// A PostgreSQL text[] literal of names (catalog names need no quoting).
std::string name_array(const std::vector<std::string>& names) {
  std::string out = "{";
  for (const auto& name : names)
    out += (out.size() == 1 ? "" : ",") + name;
  return out + "}";
}

/// "kind voice has 2 active reservations and 7 ledger rows, and 1 jobs of
/// unknown outcome; ...", empty when every dropped kind is unused.
std::string still_used(pqxx::work& tx, const std::string& dropped) {
  // The ledger has no index on kind: one scan, paid only when a kind is
  // really dropped. A job of unknown outcome names its kind too: resolving
  // it succeeded charges its hold.
  auto rows = tx.exec_params(
    "SELECT k, (SELECT count(*) FROM reservations WHERE kind = k),"
    "       (SELECT count(*) FROM ledger WHERE kind = k),"
    "       (SELECT count(*) FROM uncertain_reservations"
    "         WHERE kind = k AND outcome IS NULL)"
    "  FROM unnest($1::text[]) AS k ORDER BY k",
    dropped);
  std::string out;
  for (const auto& r : rows) {
    auto active = r[1].as<int64_t>();
    auto charges = r[2].as<int64_t>();
    auto unknown = r[3].as<int64_t>();
    if (active == 0 && charges == 0 && unknown == 0)
      continue;
    out += (out.empty() ? "" : "; ") + std::string{"kind "}
           + r[0].as<std::string>() + " has " + std::to_string(active)
           + " active reservations and " + std::to_string(charges)
           + " ledger rows";
    if (unknown > 0)
      out += ", and " + std::to_string(unknown) + " jobs of unknown outcome";
  }
  return out;
}

} // namespace

caf::error record_catalog_kinds(const std::string& dsn,
                                const catalog& products) {
  std::vector<std::string> names;
  for (const auto& k : products.kinds)
    names.push_back(k.name);
  auto current = name_array(names);
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    // Servers starting together on one database take turns.
    tx.exec("LOCK TABLE catalog_kinds IN EXCLUSIVE MODE");
    auto gone = tx.exec_params1(
                    "SELECT coalesce(array_agg(kind ORDER BY kind), '{}')::text"
                    "  FROM catalog_kinds WHERE kind <> ALL ($1::text[])",
                    current)[0]
                  .as<std::string>();
    if (gone != "{}") {
      if (auto used = still_used(tx, gone); !used.empty())
        return caf::make_error(
          ec::invalid_argument,
          "the catalog drops kinds still in use: " + used
            + "; keep them in the catalog (their jobs and charges name "
              "them)");
      tx.exec_params("DELETE FROM catalog_kinds WHERE kind = ANY ($1::text[])",
                     gone);
      spdlog::warn("catalog dropped kinds={} (unused)", gone);
    }
    tx.exec_params("INSERT INTO catalog_kinds (kind)"
                   " SELECT unnest($1::text[]) ON CONFLICT DO NOTHING",
                   current);
    tx.commit();
    return caf::none;
  } catch (...) {
    auto why = classify(std::current_exception());
    return caf::make_error(why.code, "recording the catalog's kinds: "
                                       + one_line(why.detail));
  }
}

} // namespace chargeonce::persistence
