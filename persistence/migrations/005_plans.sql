-- Every lookup in the hot functions has an index (primary keys, the unique
-- chat_id of reservations, the unique reservation_id of the ledger), and
-- must use it whatever the statistics say. PL/pgSQL caches a generic plan
-- per connection after five calls; one made while the ledger or the
-- reservations looked empty is a sequential scan, and it stays cached (until
-- the next ANALYZE) while the table grows, so every commit reads the whole
-- ledger. Measured on the bench (64 clients, 100,000 chats): 1,086 cycles/s
-- with 662 million ledger rows read by scans, 3,584 with this setting.
-- The setting applies to the nested functions for the duration of one call.
ALTER FUNCTION chargeonce_apply(jsonb, bigint) SET enable_seqscan = off;
