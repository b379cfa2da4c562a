// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's client processes (--processes=N): the parent starts N
// copies of itself with the hidden --child flag, releases them into one
// measuring window over a pipe and merges the figures they send back; and
// resident memory from /proc.
#pragma once

#include "tools/bench/loop.hpp"
#include "tools/bench/options.hpp"

#include <optional>
#include <string>
#include <vector>

namespace chargeonce::bench {

/// Runs the clients of one remote or baseline run in o.processes child
/// processes (clients split as evenly as possible), in the window
/// `make_window` returns once they are all ready, and merges their stats.
run_result run_processes(const std::string& mode, size_t clients,
                         const bench_options& o, const chat_range& chats,
                         const window_maker& make_window);

/// The body of a child process: connects its clients, says "ready" on
/// stdout, reads the window from stdin, runs and writes its stats to
/// stdout. Returns the exit status.
int child_main(const bench_options& o);

/// What a child process hands back: its clients' figures and how long its
/// window was open (past --duration when --min-cycles held it open).
struct child_report {
  client_stats stats;
  double duration_s = 0;
};

/// child_report as lines of text, and back (nullopt if malformed).
std::string serialize(const child_report& report);
std::optional<child_report> deserialize_report(const std::string& text);

/// `args` as the null-terminated argv (or envp) that exec takes; points
/// into `args`, which must outlive it.
std::vector<char*> argv_of(std::vector<std::string>& args);

/// VmHWM and VmRSS of a process (0: this one); nullopt if unreadable.
std::optional<memory_figures> read_memory(int64_t pid, std::string process);

/// The CPU a process has used so far, in clock ticks (/proc/PID/stat).
struct process_cpu_ticks {
  int64_t parent = 0; ///< its parent's pid
  int64_t own = 0;    ///< user + system
  /// User + system of its children that ended and were waited for.
  int64_t ended_children = 0;
};

/// process_cpu_ticks of a process (0: this one); nullopt if unreadable.
std::optional<process_cpu_ticks> read_cpu_ticks(int64_t pid);

/// Clock ticks (/proc's unit, usually 10 ms) in seconds.
double seconds_of_ticks(int64_t ticks);

/// User + system CPU seconds a process (0: this one) has used so far, from
/// /proc/PID/stat; nullopt if unreadable.
std::optional<double> read_cpu_s(int64_t pid);

/// Restarts this process's VmHWM at its current RSS, so that the next read
/// is the peak of one run; false if the kernel does not allow it.
bool reset_peak_rss();

} // namespace chargeonce::bench
