<?php
// SPDX-License-Identifier: Apache-2.0

declare(strict_types=1);

namespace Chargeonce;

/**
 * Every route of the HTTP API (docs/http.md), with the role whose token it
 * needs and whether a repeat is safe. The retry-safe ones are exactly those
 * docs/clients.md names (the C++ client's retry_safe, client/retry.hpp,
 * says why for each).
 */
enum Operation: string
{
    case Touch = 'touch';
    case Reserve = 'reserve';
    case Cancel = 'cancel';
    case CancelReservation = 'cancel-reservation';
    case Status = 'status';
    case Events = 'events';
    case Start = 'start';
    case Heartbeat = 'heartbeat';
    case Commit = 'commit';
    case Fail = 'fail';
    case Uncertain = 'uncertain';
    case Resolve = 'resolve';
    case Unresolved = 'unresolved';
    case CreateChat = 'create-chat';
    case TopUp = 'top-up';
    case VoidGrant = 'void-grant';
    case SetPremium = 'set-premium';
    case SetFlags = 'set-flags';
    case SetLimits = 'set-limits';
    case History = 'history';
    case Explain = 'explain';
    case Healthz = 'healthz';
    case Readyz = 'readyz';
    case Metrics = 'metrics';

    /** gateway, worker or admin: whose token the route needs; null: none. */
    public function role(): ?string
    {
        return match ($this) {
            self::Touch, self::Reserve, self::Cancel, self::CancelReservation, self::Status,
            self::Events => 'gateway',
            self::Start, self::Heartbeat, self::Commit, self::Fail, self::Uncertain, self::Resolve,
            self::Unresolved => 'worker',
            self::CreateChat, self::TopUp, self::VoidGrant, self::SetPremium, self::SetFlags,
            self::SetLimits, self::History, self::Explain => 'admin',
            self::Healthz, self::Readyz, self::Metrics => null,
        };
    }

    /**
     * True if sending it again after an unknown outcome (no answer,
     * storage_unavailable, request_timeout) or a refusal that changed
     * nothing (overloaded) answers and changes what sending it once would.
     */
    public function retrySafe(): bool
    {
        return match ($this) {
            // Reads.
            self::Status, self::Unresolved, self::History, self::Explain => true,
            // A repeat finds the chat registered and its window just opened.
            self::Touch => true,
            // By its request id (the client makes one when the caller gave none):
            // a repeat returns the job the first try made.
            self::Reserve => true,
            // By reservation: a repeat returns the same reservation, the first
            // receipt or resolution, or finds the job ended; the worker
            // identity, the same on every try, is the one the start recorded.
            self::Start, self::Heartbeat, self::Commit, self::Fail, self::Uncertain, self::Resolve => true,
            // By payment id: a repeat returns the first receipt.
            self::TopUp => true,
            // By grant (or the payment id that made it): a repeat answers the
            // voided grant again and voids nothing more.
            self::VoidGrant => true,
            // Absolute values: a repeat sets the same ones.
            self::SetPremium, self::SetFlags, self::SetLimits => true,
            // A bare cancel names the chat, not a job: repeated after the first
            // took effect it could cancel the user's next job; a named one would
            // answer not_found for the job it did cancel.
            self::Cancel, self::CancelReservation => false,
            // A repeat would answer already_exists, hiding that this call created it.
            self::CreateChat => false,
            // A stream, reopened by Client::listen() after the last id instead.
            self::Events => false,
            // Probes report what they see, now.
            self::Healthz, self::Readyz, self::Metrics => false,
        };
    }
}
