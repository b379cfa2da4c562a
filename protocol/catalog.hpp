// SPDX-License-Identifier: Apache-2.0
// The products a server sells: the kinds of job and the pockets that pay for
// them, read from the operator's catalog file (catalog=PATH) or built in.
// The file's JSON form is a contract (docs/configuration.md): fields may be
// added, never renamed.
#pragma once

#include "protocol/types.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace chargeonce {

/// Pockets one catalog may have at most (and so one chat).
inline constexpr size_t catalog_pockets_max = 16;

/// What cancel does to a job a worker already started.
enum class cancel_policy : uint8_t {
  refuse = 0,  ///< `too_late`: the external call may already be paid
  request = 1, ///< the worker is asked to stop (the job lifecycle)
};

const char* to_string(cancel_policy x);

/// Parses "refuse" or "request"; false for anything else.
bool from_string(const std::string& text, cancel_policy& out);

/// One pocket a kind may be paid from and what one unit costs there.
struct payment_source {
  std::string pocket;
  int32_t price = 1; ///< in the pocket's own units, at least 1
};

/// One kind of job: how it is paid and where its workers find it.
struct kind_spec {
  std::string name;
  /// In order: the first pocket that can pay, pays. What expires first
  /// comes first, so `balance` (if listed) is last.
  std::vector<payment_source> pay_from;
  bool premium_free = false;  ///< premium chats hold and pay nothing
  std::string queue;          ///< default `<name>_generation`
  std::string priority_queue; ///< premium chats; `<name>_generation_priority`
  cancel_policy cancel_after_start = cancel_policy::refuse;
};

/// One pocket: a daily quota refilled with the chat's window, or the
/// purchased balance.
struct pocket_spec {
  std::string name;
  bool purchased = false;    ///< only `balance`
  int32_t free_daily = 0;    ///< the window's refill on the free plan
  int32_t premium_daily = 0; ///< on the premium plan
};

/// The kinds and pockets of one server; pockets and kinds keep the file's
/// order.
struct catalog {
  std::vector<pocket_spec> pockets;
  std::vector<kind_spec> kinds;

  /// nullptr when the catalog has no such kind or pocket.
  const kind_spec* find_kind(const std::string& name) const;
  const pocket_spec* find_pocket(const std::string& name) const;

  /// The kinds' names, sorted and comma-separated (for error messages).
  std::string kind_names() const;

  /// The pockets' names, sorted and comma-separated.
  std::string pocket_names() const;

  /// What a refill gives a chat of the plan: every daily pocket at its
  /// quota (balance is left as it is).
  chargeonce::pockets daily_quotas(bool premium) const;
};

/// The daily quotas of the built-in pockets (the free-daily-* and
/// premium-daily-* options).
struct builtin_quotas {
  int32_t free_messages = 10;
  int32_t free_images = 3;
  int32_t premium_messages = 10;
  int32_t premium_images = 10;
};

/// The original design's rules: `text` paid from daily messages only and
/// free for premium chats; `image` from daily images, then balance.
catalog builtin_catalog(const builtin_quotas& quotas);

/// Reads a catalog file's content into `out`. Returns why it is refused (a
/// message for the operator naming the kind, pocket or field at fault),
/// empty when it is valid.
std::string parse_catalog(const std::string& text, catalog& out);

/// Checks a catalog built in code the way parse_catalog checks a file.
std::string validate(const catalog& x);

/// A random valid catalog, for the seeded simulation and chargeonce-chaos:
/// 2 to 4 kinds (kind_0 …), 1 to 4 daily pockets (daily_0 …) beside
/// balance, each kind paid from 1 to 3 of them in a random order (balance,
/// if it is one, last) at prices of 1 to 3, some free for premium chats.
catalog generated_catalog(std::mt19937_64& rng);

/// The file form of `x`, which parse_catalog reads back to `x`.
nlohmann::ordered_json to_json(const catalog& x);

} // namespace chargeonce
