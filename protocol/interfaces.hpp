// SPDX-License-Identifier: Apache-2.0
// The typed actor interfaces that cross the network: what the server
// publishes and its clients call. The server-internal ones are in
// actors/interfaces.hpp (what a facade converts these messages into) and
// next to their actors in actors/*_actor.hpp.
#pragma once

#include "protocol/batch.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/types.hpp"

#include <caf/actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <string>
#include <vector>

namespace chargeonce {

/// The operations of one chat that no batch carries: an account's
/// changes and the resolution of jobs of unknown outcome. Every operation
/// names its chat: the server routes by it. Inside the server they keep
/// these messages (actors/interfaces.hpp).
using unbatched_actor = caf::typed_actor<
  /// Registers a chat; fails with already_exists or invalid_argument.
  caf::replies_to<atom::create, chat_spec>::with<chat_status>,
  /// uncertain of a worker that names itself (`worker`, last), as
  /// billing_actor's other worker forms.
  caf::replies_to<atom::uncertain, chat_id, reservation_id, std::string,
                  std::string>::with<reservation>,
  /// A started job whose provider call timed out (chat, id, provider_ref):
  /// outcome_unknown, its slot freed, its hold kept; a repeat with the same
  /// provider_ref answers the same.
  caf::replies_to<atom::uncertain, chat_id, reservation_id,
                  std::string>::with<reservation>,
  /// What the provider says of an uncertain job (chat, id, "succeeded" or
  /// "failed", units: 1 or more, only with succeeded; 0 is
  /// invalid_argument): charged as a commit of those units, or released.
  /// Repeated, the first resolution; the other outcome is invalid_state,
  /// after reconcile-timeout released it expired. The form without units
  /// (the whole hold) is in api_actor and worker_actor; inside the server
  /// this one carries it as units 0.
  caf::replies_to<atom::resolve, chat_id, reservation_id, std::string,
                  int32_t>::with<resolution>,
  /// Adds credits once per payment_id (chat, credits, payment_id, terms):
  /// a grant with the terms' expiry, priority and source. A retry with the
  /// same terms (a relative expiry as given, not its resolved instant)
  /// returns the first receipt and changes nothing; other terms or credits
  /// are invalid_argument. The form without terms is in billing_actor and
  /// admin_actor; inside the server this one carries it with the defaults.
  caf::replies_to<atom::top_up, chat_id, int64_t, std::string,
                  grant_terms>::with<top_up_receipt>,
  /// Voids a grant (a refund, a chargeback), named by id (chat, grant id,
  /// "") or by its top-up's payment_id (chat, 0, payment_id): what nobody
  /// holds of it leaves the balance; holds on it finish normally and what
  /// they release afterwards is voided too. Answers the grant after the
  /// void; again, the same grant, changing nothing. not_found for a grant
  /// the chat does not have, or a payment of before grants.
  caf::replies_to<atom::void_grant, chat_id, int64_t,
                  std::string>::with<grant_info>,
  /// Sets premium_until; premium is judged at reserve time only.
  caf::replies_to<atom::premium, chat_id, caf::timestamp>::with<chat_status>,
  /// Sets the given flags (started, blocked, banned).
  caf::replies_to<atom::flags, chat_id, flags_update>::with<chat_status>,
  /// Sets the chat's own limit of active jobs, or back to its plan's.
  caf::replies_to<atom::limits, chat_id, limits_update>::with<chat_status>>;

/// The billing operations of one chat, as clients send them: the account's
/// above, and the eight a batch may carry.
using billing_actor = unbatched_actor::extend<
  /// A top-up whose grant never expires, at priority 100, a purchase: the
  /// top-up of 0.2.
  caf::replies_to<atom::top_up, chat_id, int64_t,
                  std::string>::with<top_up_receipt>,
  /// Holds the price of one job (chat, kind, request_id) in a free slot;
  /// fails with busy (every slot taken), insufficient_messages,
  /// insufficient_images, not_found, chat_blocked, chat_banned,
  /// invalid_argument (no request_id where the limit is above 1, or one
  /// that names a job of another kind). A request_id of a job that ended
  /// returns that job with its final status, whatever units it names.
  caf::replies_to<atom::reserve, chat_id, kind, std::string>::with<reservation>,
  /// The same for a job of `units` units (1 to units_max; 0 is
  /// invalid_argument: leave it out for 1), split over the kind's pockets
  /// in the catalog's order.
  caf::replies_to<atom::reserve, chat_id, kind, std::string,
                  int32_t>::with<reservation>,
  /// queued -> in_progress; not_found when the reservation is gone, expired
  /// when the sweeper released it.
  caf::replies_to<atom::start, chat_id, reservation_id>::with<reservation>,
  /// Extends a started job's lease by lease-duration; expired once released.
  /// The answer's cancel_requested tells the worker the user cancelled.
  caf::replies_to<atom::heartbeat, chat_id, reservation_id>::with<reservation>,
  /// Charges exactly what was held; repeated, returns the same receipt.
  caf::replies_to<atom::commit, chat_id, reservation_id>::with<receipt>,
  /// Charges what was held for `units` (1 or more; 0 or more than held is
  /// invalid_argument: a worker that did nothing calls fail) from the
  /// pockets that expire first, and releases the rest; repeated, returns
  /// the first receipt whatever units it names.
  caf::replies_to<atom::commit, chat_id, reservation_id,
                  int32_t>::with<receipt>,
  /// Deletes the reservation: nothing was charged, nothing to refund.
  caf::replies_to<atom::fail, chat_id, reservation_id>::with<reservation>,
  /// start, heartbeat, commit (units 1 or more, inside the server 0 for the
  /// whole hold), fail and uncertain of a worker that names itself
  /// (`worker`, last; any string it chooses for this attempt, at most 256
  /// bytes): the first start of the job records it; once the job runs, a
  /// call naming another is already_started and changes nothing. The forms
  /// without it go on as before.
  caf::replies_to<atom::start, chat_id, reservation_id,
                  std::string>::with<reservation>,
  caf::replies_to<atom::heartbeat, chat_id, reservation_id,
                  std::string>::with<reservation>,
  caf::replies_to<atom::commit, chat_id, reservation_id, int32_t,
                  std::string>::with<receipt>,
  caf::replies_to<atom::fail, chat_id, reservation_id,
                  std::string>::with<reservation>,
  /// Deletes the chat's only active reservation while queued. Once started:
  /// too_late under its kind's `refuse` policy; under `request`, marks it
  /// cancel_requested and answers it (a repeat answers the same). Fails
  /// with invalid_argument when several are active.
  caf::replies_to<atom::cancel, chat_id>::with<reservation>,
  /// The same for the job named by its reservation id (chat, id, "") or by
  /// its request id (chat, 0, request_id).
  caf::replies_to<atom::cancel, chat_id, reservation_id,
                  std::string>::with<reservation>,
  /// The chat's pockets, flags and active reservation.
  caf::replies_to<atom::status, chat_id>::with<chat_status>,
  /// A user update: records activity, registers an unknown chat on the free
  /// plan, opens the daily window or refills it when refill-interval passed.
  caf::replies_to<atom::touch, chat_id>::with<chat_status>>;

/// The event stream and the reads of every chat. A subscriber (local or
/// remote) receives reservation_released, cancel_requested,
/// reconcile_needed, limits_refilled, credits_expired, credits_expiring and
/// balance_low as requests (a handler returning void answers them; one it
/// does not handle counts as answered, so a subscriber written before an
/// event existed skips it), in event id order, from Postgres' events table: at
/// least once, every server sending every event. queue_notice is a timer of
/// this server, sent at most once. A subscriber that leaves events
/// unanswered for subscriber-timeout is sent subscription_ended and
/// forgotten. `subscribe, who` starts after the newest event;
/// `subscribe, who, after` first replays every kept event after id `after`
/// (invalid_argument when `after` is beyond the newest id).
using support_actor = caf::typed_actor<
  caf::replies_to<atom::subscribe, caf::actor>::with<bool>,
  caf::replies_to<atom::subscribe, caf::actor, event_id>::with<bool>,
  /// resolve without units: "succeeded" charges the whole hold.
  caf::replies_to<atom::resolve, chat_id, reservation_id,
                  std::string>::with<resolution>,
  /// Jobs of unknown outcome of every chat after reservation id `after`,
  /// oldest id first, at most `limit` (1 to 1,000).
  caf::replies_to<atom::unresolved, reservation_id,
                  uint32_t>::with<unresolved_page>,
  /// One page of a chat's history (chat, before: a ledger id or 0 for the
  /// newest, limit: 1 to 1,000 ledger rows); not_found for an unknown chat.
  caf::replies_to<atom::history, chat_id, int64_t,
                  uint32_t>::with<history_page>,
  /// A chat as support needs it: status, plan and why, window and next
  /// refill, deadlines, the last 10 history entries.
  caf::replies_to<atom::explain, chat_id>::with<chat_explanation>>;

/// The server's published API: billing, the event stream and the reads.
using api_actor = billing_actor::extend_with<support_actor>::extend<
  /// commit of the whole hold by a worker that names itself.
  caf::replies_to<atom::commit, chat_id, reservation_id,
                  std::string>::with<receipt>>;

/// Many operations in one message (client batching). Each is answered as if
/// it had come alone, in the batch's order; one outside the endpoint's role
/// is refused with invalid_argument; more than batch_message_operations_max
/// refuse the whole batch.
using batch_signature =
  caf::replies_to<atom::batch,
                  std::vector<operation>>::with<std::vector<outcome>>;

// -- role facades: what each kind of client may call -------------------------

/// Every role's operations (the loopback --port), plus batches.
using api_facade_actor = api_actor::extend<batch_signature>;

/// Gateway nodes: they receive user updates.
using gateway_actor = caf::typed_actor<
  caf::replies_to<atom::touch, chat_id>::with<chat_status>,
  caf::replies_to<atom::reserve, chat_id, kind, std::string>::with<reservation>,
  caf::replies_to<atom::reserve, chat_id, kind, std::string,
                  int32_t>::with<reservation>,
  caf::replies_to<atom::cancel, chat_id>::with<reservation>,
  caf::replies_to<atom::cancel, chat_id, reservation_id,
                  std::string>::with<reservation>,
  caf::replies_to<atom::status, chat_id>::with<chat_status>,
  caf::replies_to<atom::subscribe, caf::actor>::with<bool>,
  caf::replies_to<atom::subscribe, caf::actor, event_id>::with<bool>,
  batch_signature>;

/// Workers: they run the jobs. A worker cannot top up.
using worker_actor = caf::typed_actor<
  batch_signature,
  caf::replies_to<atom::start, chat_id, reservation_id>::with<reservation>,
  caf::replies_to<atom::heartbeat, chat_id, reservation_id>::with<reservation>,
  caf::replies_to<atom::commit, chat_id, reservation_id>::with<receipt>,
  caf::replies_to<atom::commit, chat_id, reservation_id,
                  int32_t>::with<receipt>,
  caf::replies_to<atom::fail, chat_id, reservation_id>::with<reservation>,
  caf::replies_to<atom::uncertain, chat_id, reservation_id,
                  std::string>::with<reservation>,
  caf::replies_to<atom::start, chat_id, reservation_id,
                  std::string>::with<reservation>,
  caf::replies_to<atom::heartbeat, chat_id, reservation_id,
                  std::string>::with<reservation>,
  caf::replies_to<atom::commit, chat_id, reservation_id,
                  std::string>::with<receipt>,
  caf::replies_to<atom::commit, chat_id, reservation_id, int32_t,
                  std::string>::with<receipt>,
  caf::replies_to<atom::fail, chat_id, reservation_id,
                  std::string>::with<reservation>,
  caf::replies_to<atom::uncertain, chat_id, reservation_id, std::string,
                  std::string>::with<reservation>,
  caf::replies_to<atom::resolve, chat_id, reservation_id,
                  std::string>::with<resolution>,
  caf::replies_to<atom::resolve, chat_id, reservation_id, std::string,
                  int32_t>::with<resolution>,
  caf::replies_to<atom::unresolved, reservation_id,
                  uint32_t>::with<unresolved_page>>;

/// Administration: payments, account changes and the support view. A
/// gateway cannot commit.
using admin_actor = caf::typed_actor<
  caf::replies_to<atom::create, chat_spec>::with<chat_status>,
  caf::replies_to<atom::top_up, chat_id, int64_t,
                  std::string>::with<top_up_receipt>,
  caf::replies_to<atom::top_up, chat_id, int64_t, std::string,
                  grant_terms>::with<top_up_receipt>,
  caf::replies_to<atom::void_grant, chat_id, int64_t,
                  std::string>::with<grant_info>,
  caf::replies_to<atom::premium, chat_id, caf::timestamp>::with<chat_status>,
  caf::replies_to<atom::flags, chat_id, flags_update>::with<chat_status>,
  caf::replies_to<atom::limits, chat_id, limits_update>::with<chat_status>,
  caf::replies_to<atom::history, chat_id, int64_t,
                  uint32_t>::with<history_page>,
  caf::replies_to<atom::explain, chat_id>::with<chat_explanation>>;

} // namespace chargeonce
