// SPDX-License-Identifier: Apache-2.0
// One function per route (the table is in routes.cpp). Each reads its
// input, makes at most one CAF request to its role's facade, and answers.
#pragma once

#include "main/http/context.hpp"

namespace chargeonce::http {

// -- gateway (billing.cpp) ----------------------------------------------------
void touch(exchange& x);
void reserve(exchange& x);
void cancel(exchange& x);
void cancel_reservation(exchange& x);
void status(exchange& x);

// -- worker (billing.cpp) -----------------------------------------------------
void start(exchange& x);
void heartbeat(exchange& x);
void commit(exchange& x);
void fail(exchange& x);
void uncertain(exchange& x);
void resolve(exchange& x);
void list_reservations(exchange& x);

// -- admin (billing.cpp) ------------------------------------------------------
void create_chat(exchange& x);
void top_up(exchange& x);
void void_grant(exchange& x);
void void_grant_by_payment(exchange& x);
void set_premium(exchange& x);
void set_flags(exchange& x);
void set_limits(exchange& x);
void history(exchange& x);
void explain(exchange& x);

// -- events (events.cpp) ------------------------------------------------------
/// Server-Sent Events: queue_notice, reservation_released, cancel_requested,
/// reconcile_needed, limits_refilled, credits_expired, credits_expiring,
/// balance_low.
void events(exchange& x);

// -- operations (server.cpp) --------------------------------------------------
void healthz(exchange& x);
void readyz(exchange& x);
void metrics(exchange& x);

} // namespace chargeonce::http
