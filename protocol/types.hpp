// SPDX-License-Identifier: Apache-2.0
// The domain structs that cross actor and network boundaries.
#pragma once

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>
#include <caf/timestamp.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace chargeonce {

/// A chat as the bot platform numbers it; negative for group chats.
using chat_id = int64_t;

/// The database identity of a reservation; always positive.
using reservation_id = int64_t;

/// An event's id: increasing in commit order, 1 for the first (0: none).
using event_id = int64_t;

/// What a job produces: a kind of the server's catalog
/// (protocol/catalog.hpp), which decides which pockets pay for it. `text`
/// and `image` are the built-in catalog's kinds.
class kind {
public:
  kind() = default;
  explicit kind(std::string name) : name_(std::move(name)) {}

  static const kind text;
  static const kind image;

  const std::string& name() const { return name_; }

  friend bool operator==(const kind& x, const kind& y) {
    return x.name_ == y.name_;
  }
  friend bool operator!=(const kind& x, const kind& y) { return !(x == y); }
  friend bool operator<(const kind& x, const kind& y) {
    return x.name_ < y.name_;
  }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, kind& x) {
    return f(caf::meta::type_name("kind"), x.name_);
  }

private:
  std::string name_ = "text";
};

inline const kind kind::text{"text"};
inline const kind kind::image{"image"};

/// Where a reservation is in its life: active (queued, or taken by a worker)
/// or, for a job found again by its request id, how it ended.
enum class reservation_status : uint8_t {
  queued = 0,
  in_progress = 1,
  committed = 2, ///< charged (the ledger has its receipt)
  failed = 3,    ///< the worker gave up: nothing charged
  cancelled = 4, ///< cancelled while queued: nothing charged
  released = 5,  ///< the sweeper released it: nothing charged
  /// The worker's provider call timed out (`uncertain`): no slot, the hold
  /// kept until `resolve` or reconcile-timeout.
  outcome_unknown = 6,
};

/// queued or in_progress: the job holds its price and a slot. (An
/// outcome_unknown job holds its price only.)
bool is_active(reservation_status x);

const std::string& to_string(const kind& x);
const char* to_string(reservation_status x);

/// A name of a kind or pocket: [a-z][a-z0-9_]{0,31}.
bool is_catalog_name(const std::string& text);

/// Parses a kind's name: [a-z][a-z0-9_]{0,31}, whether or not the server's
/// catalog has it (the server answers an unknown one); false otherwise.
bool from_string(const std::string& text, kind& out);

/// Parses a status's name (to_string); false for anything else.
bool from_string(const std::string& text, reservation_status& out);

/// True for a name from_string accepts: what a peer may legally send.
bool is_valid(const kind& x);

/// The built-in catalog's pockets; any catalog has `balance`.
namespace pocket {
inline constexpr const char* daily_messages = "daily_messages";
inline constexpr const char* daily_images = "daily_images";
/// The purchased pocket: top-ups credit it, it never expires, and every
/// kind may be paid from it, last, after the daily pockets.
inline constexpr const char* balance = "balance";
} // namespace pocket

/// Amounts per pocket, by the catalog's pocket names: a chat's pockets, a
/// reservation's hold, a charge. A pocket not listed holds 0, so two values
/// that differ only in listed zeros are equal.
class pockets {
public:
  using value_type = std::pair<std::string, int32_t>;

  pockets() = default;

  /// The built-in catalog's three pockets.
  pockets(int32_t daily_messages, int32_t daily_images, int32_t balance);

  /// 0 for a pocket not listed.
  int32_t get(const std::string& name) const;

  /// Lists `name` with `amount`, zero included (status lists every pocket).
  void set(const std::string& name, int32_t amount);

  void add(const std::string& name, int32_t amount);

  /// Adds or subtracts every pocket of `x` (no clamp: an auditor's sums).
  pockets& operator+=(const pockets& x);
  pockets& operator-=(const pockets& x);

  /// True when some pocket holds less than zero.
  bool any_negative() const;

  /// True when no pocket holds more than in `most`.
  bool within(const pockets& most) const;

  /// Sorted by name without duplicates, as set() keeps them: false only
  /// for a value a peer deserialized from something else.
  bool well_formed() const;

  /// The listed pockets, sorted by name.
  const std::vector<value_type>& items() const { return items_; }

  friend bool operator==(const pockets& x, const pockets& y);
  friend bool operator!=(const pockets& x, const pockets& y) {
    return !(x == y);
  }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, pockets& x) {
    return f(caf::meta::type_name("pockets"), x.items_);
  }

private:
  std::vector<value_type> items_;
};

/// Jobs one chat may run at once: a chat's own limit and the plans'
/// defaults (free-max-active-jobs, premium-max-active-jobs) lie in here.
inline constexpr int32_t max_active_jobs_min = 1;
inline constexpr int32_t max_active_jobs_max = 64;

/// What an admin sets when registering a chat.
struct chat_spec {
  chat_id chat = 0;
  pockets initial;                             ///< starting amounts
  caf::optional<caf::timestamp> premium_until; ///< none: never premium
  /// The chat's own limit of active jobs; none: its plan's.
  caf::optional<int32_t> max_active_jobs;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_spec& x) {
  return f(caf::meta::type_name("chat_spec"), x.chat, x.initial,
           x.premium_until, x.max_active_jobs);
}

/// What one job may cost at most, in its kind's units (reserve's `units`).
inline constexpr int32_t units_max = 1'000'000;

/// A grant's place in the spending order: lower spends first.
inline constexpr int32_t grant_priority_min = 0;
inline constexpr int32_t grant_priority_max = 1000;
inline constexpr int32_t grant_priority_default = 100;
/// The longest relative expiry a top-up takes: 100 years, in milliseconds.
inline constexpr int64_t grant_expires_in_ms_max = 3'155'760'000'000;

/// One job's hold: the price decided at enqueue, paid at commit. Active
/// while queued or in progress; a reserve retried with an ended job's
/// request id gets it back with its final status and ended_at.
struct reservation {
  reservation_id id = 0;
  chat_id chat = 0;
  chargeonce::kind kind = kind::text;
  reservation_status status = reservation_status::queued;
  std::string queue;      ///< the kind's queue (catalog), e.g. image_generation
  pockets held;           ///< what commit will take, per pocket
  std::string request_id; ///< the caller's idempotency key, may be empty
  caf::timestamp created_at;
  /// Armed by the first heartbeat; past it, the sweeper releases the job.
  caf::optional<caf::timestamp> lease_expires_at;
  int32_t slot = 0; ///< which of the chat's max_active_jobs it occupies
  caf::optional<caf::timestamp> ended_at; ///< set once it ended
  int32_t units = 1; ///< what the job may cost at most, in units
  /// The units `held` pays for, per pocket: a commit of fewer units charges
  /// them from the pockets that expire first and releases the rest.
  pockets held_units{};
  /// Cancel was asked after the job started, under its kind's `request`
  /// policy: the worker should stop (fail), or commit what was done.
  bool cancel_requested = false;
  /// outcome_unknown: the idempotency key the worker gave its provider,
  /// and since when nobody knows (reconcile-timeout runs from there).
  std::string provider_ref;
  caf::optional<caf::timestamp> uncertain_at;
  /// The chat's window the hold was taken in: its daily part belongs to
  /// that window's pockets, which paid for it even after a refill.
  int64_t window = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reservation& x) {
  return f(caf::meta::type_name("reservation"), x.id, x.chat, x.kind, x.status,
           x.queue, x.held, x.request_id, x.created_at, x.lease_expires_at,
           x.slot, x.ended_at, x.units, x.held_units, x.cancel_requested,
           x.provider_ref, x.uncertain_at, x.window);
}

/// The largest provider_ref `uncertain` takes, in bytes.
inline constexpr size_t provider_ref_max_bytes = 256;

/// What `resolve` recorded for a job of unknown outcome, once: succeeded
/// (charged as a commit of `units` would) or failed (nothing charged, the
/// hold released). A retry returns the same.
struct resolution {
  reservation_id reservation = 0;
  chat_id chat = 0;
  chargeonce::kind kind = kind::text;
  std::string outcome; ///< "succeeded" or "failed"
  pockets charged;     ///< what the ledger row took (failed: nothing)
  pockets released;    ///< what the hold gave back
  int32_t units = 0;   ///< the units charged (failed: 0)
  caf::timestamp resolved_at;
  std::string provider_ref;
  int64_t window = 0; ///< the window whose daily pockets paid (the hold's)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, resolution& x) {
  return f(caf::meta::type_name("resolution"), x.reservation, x.chat, x.kind,
           x.outcome, x.charged, x.released, x.units, x.resolved_at,
           x.provider_ref, x.window);
}

/// One page of jobs whose outcome is unknown, by id (keyset: the next page
/// starts after the last id).
struct unresolved_page {
  std::vector<reservation> jobs;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, unresolved_page& x) {
  return f(caf::meta::type_name("unresolved_page"), x.jobs);
}

/// The ledger entry of one commit; a repeated commit returns the same one.
struct receipt {
  reservation_id reservation = 0;
  chat_id chat = 0;
  chargeonce::kind kind = kind::text;
  pockets charged; ///< taken from each pocket (held, clamped at zero)
  caf::timestamp committed_at;
  int32_t units = 1;  ///< the units charged: the hold's, or fewer
  pockets released{}; ///< what the hold kept back from each pocket
  /// The window whose daily pockets paid (the hold's): `charged` names
  /// what it paid even when a refill has opened a newer one since.
  int64_t window = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, receipt& x) {
  return f(caf::meta::type_name("receipt"), x.reservation, x.chat, x.kind,
           x.charged, x.committed_at, x.units, x.released, x.window);
}

/// One credit grant of a chat's balance, as it stands: `left` = credits -
/// charged - expired - voided (what holds hold of it is still in it),
/// `held` what open holds hold of it.
struct grant_info {
  int64_t id = 0;
  chat_id chat = 0;
  std::string source = "purchase";
  int32_t credits = 0;
  int32_t left = 0;
  int32_t held = 0;
  int32_t priority = grant_priority_default;
  caf::optional<caf::timestamp> expires_at = caf::none; ///< none: never
  std::string payment_id; ///< empty: not a top-up's (an opening balance)
  caf::timestamp created_at;
  caf::optional<caf::timestamp> expired_at = caf::none; ///< unheld left expired
  caf::optional<caf::timestamp> voided_at = caf::none;
  /// It pays nothing new: its expiry came (written or not) before any void,
  /// or it was voided first. `left` is then what holds still hold of it.
  bool expired = false;
  bool voided = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grant_info& x) {
  return f(caf::meta::type_name("grant_info"), x.id, x.chat, x.source,
           x.credits, x.left, x.held, x.priority, x.expires_at, x.payment_id,
           x.created_at, x.expired_at, x.voided_at, x.expired, x.voided);
}

/// A chat's pockets, flags and active reservations, as Postgres has them.
struct chat_status {
  chat_id chat = 0;
  pockets amounts; ///< what the pockets hold (active holds not deducted)
  caf::optional<caf::timestamp> premium_until;
  bool premium = false; ///< premium_until lies in the future
  bool started = false;
  bool blocked = false;
  bool banned = false;
  /// The oldest active reservation; none: no job is active.
  caf::optional<reservation> active;
  /// When the current daily window opened; none: no window is open, the
  /// next activity opens one.
  caf::optional<caf::timestamp> window_started_at;
  caf::optional<caf::timestamp> last_activity_at;
  /// Jobs the chat may run at once: its own limit, else its plan's.
  int32_t max_active_jobs = 1;
  caf::optional<int32_t> own_max_active_jobs; ///< none: the plan's
  std::vector<reservation> reservations; ///< every active one, oldest first
  /// What their holds take from the pockets now: holds of this window, and
  /// the balance part of holds of past windows (held_by).
  pockets held;
  /// The chat's window number: one more at every refill.
  int64_t window = 0;
  /// Its grants with credits left, in spending order (an expired or voided
  /// one while holds still hold some of it).
  std::vector<grant_info> grants;
  /// balance_low fires when the available balance falls below this: the
  /// chat's own threshold, else the server's balance-low-threshold; 0: off.
  int32_t balance_low_threshold = 0;
  caf::optional<int32_t> own_balance_low_threshold; ///< none: the server's
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_status& x) {
  return f(caf::meta::type_name("chat_status"), x.chat, x.amounts,
           x.premium_until, x.premium, x.started, x.blocked, x.banned, x.active,
           x.window_started_at, x.last_activity_at, x.max_active_jobs,
           x.own_max_active_jobs, x.reservations, x.held, x.window, x.grants,
           x.balance_low_threshold, x.own_balance_low_threshold);
}

/// set-flags: each flag given is set, the others are left as they are.
struct flags_update {
  caf::optional<bool> started;
  caf::optional<bool> blocked;
  caf::optional<bool> banned;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, flags_update& x) {
  return f(caf::meta::type_name("flags_update"), x.started, x.blocked,
           x.banned);
}

/// The largest balance-low threshold, a chat's or the server's: the
/// largest balance there is.
inline constexpr int32_t balance_low_threshold_max = 2'147'483'647;

/// set-limits: the chat's own limit of active jobs (none: its plan's
/// again) and its own balance-low threshold (none: the server's again);
/// each only when its `set_` flag is true, the other left as it is.
struct limits_update {
  caf::optional<int32_t> max_active_jobs;
  bool set_max_active_jobs = true;
  caf::optional<int32_t> balance_low_threshold;
  bool set_balance_low_threshold = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, limits_update& x) {
  return f(caf::meta::type_name("limits_update"), x.max_active_jobs,
           x.set_max_active_jobs, x.balance_low_threshold,
           x.set_balance_low_threshold);
}

/// Active reservations in Postgres (all servers), by the chat's plan now.
struct active_count {
  int64_t free = 0;
  int64_t premium = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, active_count& x) {
  return f(caf::meta::type_name("active_count"), x.free, x.premium);
}

/// A top-up's grant beyond its credits: when it expires (never, at an
/// instant, or a time after the top-up) and where it stands in the spending
/// order. The defaults are the top-up of 0.2: a purchase that never
/// expires, at priority 100.
struct grant_terms {
  caf::optional<caf::timestamp> expires_at;  ///< in the future
  int64_t expires_in_ms = 0;                 ///< 0: none; not with expires_at
  int32_t priority = grant_priority_default; ///< 0..1000, lower spends first
  std::string source = "purchase";           ///< purchase, promo or admin
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grant_terms& x) {
  return f(caf::meta::type_name("grant_terms"), x.expires_at, x.expires_in_ms,
           x.priority, x.source);
}

/// The ledger entry of one purchase and the grant it made; a retried top-up
/// returns the same one. A top-up made before grants (0.2) names no grant
/// (grant_id 0) and shows the terms of then.
struct top_up_receipt {
  chat_id chat = 0;
  std::string payment_id;
  int32_t credits = 0; ///< added to the balance
  caf::timestamp purchased_at;
  int64_t grant_id = 0;
  std::string source = "purchase";
  int32_t priority = grant_priority_default;
  caf::optional<caf::timestamp> expires_at = caf::none; ///< none: never
  int64_t expires_in_ms = 0; ///< as the top-up gave it; 0: not relative
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, top_up_receipt& x) {
  return f(caf::meta::type_name("top_up_receipt"), x.chat, x.payment_id,
           x.credits, x.purchased_at, x.grant_id, x.source, x.priority,
           x.expires_at, x.expires_in_ms);
}

} // namespace chargeonce
