// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/statements.hpp"

#include <pqxx/pqxx>

#include <stdexcept>
#include <string_view>

namespace chargeonce::bench {

namespace {

/// This database's oid, pg_stat_statements.track (NULL: the library is
/// not loaded) and whether the extension (its view) is created here.
constexpr const char* check_sql =
  "SELECT oid, current_setting('pg_stat_statements.track', true),"
  "       EXISTS (SELECT FROM pg_extension"
  "                WHERE extname = 'pg_stat_statements')"
  "  FROM pg_database WHERE datname = current_database()";

/// Resets this database's entries only: other databases of the cluster
/// (another suite's, another bench's) keep their counts.
constexpr const char* reset_sql =
  "SELECT pg_stat_statements_reset(0, $1::oid, 0)";

/// A statement run at the top level and inside functions has an entry for
/// each, and one per user: summed per text and level. Our own reset (and
/// any reading of the view) is left out.
constexpr const char* read_sql =
  "SELECT query, toplevel, sum(calls)::float8, sum(total_exec_time)::float8,"
  "       sum(rows)::float8"
  "  FROM pg_stat_statements"
  " WHERE dbid = $1::oid AND query NOT LIKE '%pg_stat_statements%'"
  " GROUP BY query, toplevel"
  " ORDER BY 4 DESC, 3 DESC"
  " LIMIT $2";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
         || c == '\v';
}

bool is_utf8_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

std::runtime_error unavailable(const std::string& why) {
  return std::runtime_error{
    "--statements: " + why
    + " (scripts/bench --statements loads pg_stat_statements with track = "
      "all in its cluster and creates the extension)"};
}

} // namespace

struct statements_reader::impl {
  explicit impl(const std::string& dsn) : conn(dsn) {}
  pqxx::connection conn;
  int64_t database = 0; ///< the oid of the DSN's database
};

std::string one_line(const std::string& text, size_t max) {
  std::string out;
  out.reserve(text.size());
  for (auto c : text) {
    if (!is_space(c))
      out.push_back(c);
    else if (!out.empty() && out.back() != ' ')
      out.push_back(' ');
  }
  if (!out.empty() && out.back() == ' ')
    out.pop_back();
  constexpr std::string_view ellipsis = "...";
  if (out.size() <= max || max < ellipsis.size())
    return out;
  auto cut = max - ellipsis.size();
  while (cut > 0 && is_utf8_continuation(out[cut]))
    --cut;
  out.resize(cut);
  out += ellipsis;
  return out;
}

statements_reader::statements_reader(const std::string& dsn)
    : impl_(std::make_unique<impl>(dsn)) {
  pqxx::nontransaction tx{impl_->conn};
  auto r = tx.exec1(check_sql);
  impl_->database = r[0].as<int64_t>();
  track_ = r[1].is_null() ? "" : r[1].as<std::string>();
  if (track_.empty())
    throw unavailable("pg_stat_statements is not loaded "
                      "(shared_preload_libraries)");
  if (!r[2].as<bool>())
    throw unavailable("the extension pg_stat_statements is not created in "
                      "this database");
  if (track_ == "none")
    throw unavailable("pg_stat_statements.track is none: nothing is counted");
  tx.commit();
  try {
    reset(); // fails here, not in a run, when we may not reset
  } catch (const pqxx::sql_error& e) {
    throw unavailable(std::string{"cannot reset pg_stat_statements: "}
                      + e.what());
  }
}

statements_reader::~statements_reader() = default;

void statements_reader::reset() {
  pqxx::nontransaction tx{impl_->conn};
  tx.exec_params(reset_sql, impl_->database);
  tx.commit();
}

std::vector<statement_figures> statements_reader::read(uint64_t cycles) {
  std::vector<statement_figures> out;
  if (cycles == 0)
    return out;
  pqxx::nontransaction tx{impl_->conn};
  auto rows = tx.exec_params(read_sql, impl_->database,
                             static_cast<int64_t>(statements_reported_max));
  tx.commit();
  auto per_cycle = [n = static_cast<double>(cycles)](double x) {
    return x / n;
  };
  for (const auto& row : rows)
    out.push_back({one_line(row[0].as<std::string>(), statement_text_max),
                   row[1].as<bool>(), per_cycle(row[2].as<double>()),
                   per_cycle(row[3].as<double>() * 1000.0), // ms → µs
                   per_cycle(row[4].as<double>())});
  return out;
}

} // namespace chargeonce::bench
