// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench --statements: what Postgres ran in a run's measured
// window, statement by statement, from pg_stat_statements: counted from a
// reset when the window opens to a reading when the run has ended.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace chargeonce::bench {

/// Statements a run reports: the costliest this many.
constexpr size_t statements_reported_max = 12;
/// A statement's text in the report, on one line: at most this long.
constexpr size_t statement_text_max = 80;

/// One statement of a run, per measured cycle.
struct statement_figures {
  std::string query; ///< normalized ($1 for constants), one_line()
  /// false: run inside a function (pg_stat_statements.track = all), whose
  /// own time includes this statement's.
  bool top_level = true;
  double calls_per_cycle = 0;
  double exec_us_per_cycle = 0; ///< execution time, planning not included
  double rows_per_cycle = 0;
};

/// `text` on one line: every run of white space one blank, then cut to
/// `max` bytes (ending in "...", never inside a UTF-8 character).
std::string one_line(const std::string& text, size_t max);

/// pg_stat_statements of the database a DSN names, on a connection of its
/// own. Blocking; one thread at a time.
class statements_reader {
public:
  /// Connects and checks that pg_stat_statements is loaded, created in this
  /// database, tracks statements and may be reset by us; throws
  /// std::runtime_error saying what is missing and how to get it.
  explicit statements_reader(const std::string& dsn);
  ~statements_reader();
  statements_reader(const statements_reader&) = delete;
  statements_reader& operator=(const statements_reader&) = delete;

  /// pg_stat_statements.track: all (statements inside functions too) or
  /// top (the calls only).
  const std::string& track() const { return track_; }

  /// Forgets this database's counts (other databases keep theirs): the
  /// measured window starts.
  void reset();

  /// This database's statements since reset() over `cycles`, the costliest
  /// statements_reported_max first, without our own (the reset).
  std::vector<statement_figures> read(uint64_t cycles);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::string track_;
};

} // namespace chargeonce::bench
