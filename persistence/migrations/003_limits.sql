-- Daily windows, purchases and reactivation.

-- When the reactivation scan last refilled this chat; it is due again only
-- after new activity (reactivated_at < last_activity_at).
ALTER TABLE chats ADD COLUMN reactivated_at timestamptz NULL;

-- The reactivation scan walks exactly the chats it may refill, oldest
-- activity first: started, not blocked or banned, not yet reactivated in the
-- current idle period.
CREATE INDEX chats_reactivation ON chats (last_activity_at, chat_id)
  WHERE started AND NOT blocked AND NOT banned
    AND last_activity_at IS NOT NULL
    AND (reactivated_at IS NULL OR reactivated_at < last_activity_at);

-- The ledger also records purchases; payment_id makes a retried webhook
-- return the first result instead of crediting twice.
ALTER TABLE ledger
  ALTER COLUMN reservation_id DROP NOT NULL,
  ALTER COLUMN kind DROP NOT NULL,
  ADD COLUMN entry text NOT NULL DEFAULT 'charge'
    CHECK (entry IN ('charge', 'top_up')),
  ADD COLUMN payment_id text NULL UNIQUE,
  ADD COLUMN credited_balance integer NOT NULL DEFAULT 0
    CHECK (credited_balance >= 0),
  ADD CONSTRAINT ledger_entry_shape CHECK (
    (entry = 'charge' AND reservation_id IS NOT NULL AND kind IS NOT NULL
      AND payment_id IS NULL)
    OR (entry = 'top_up' AND reservation_id IS NULL AND payment_id IS NOT NULL
      AND credited_balance > 0));
