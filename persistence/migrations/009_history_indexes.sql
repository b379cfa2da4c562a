-- The support view (history, explain) reads a page of one chat's timeline
-- from each table that keeps its reservations, by (chat_id, time), so that
-- a page costs what it shows however long the chat's past is.
-- released_reservations and uncertain_reservations are written off the hot
-- path only (a sweep's release, a provider timeout). ended_reservations'
-- index leaves out committed jobs, the bulk of them: a commit pays for no
-- new index (the history finds it through its ledger row); failed,
-- cancelled and released jobs do.
CREATE INDEX released_reservations_chat_id
  ON released_reservations (chat_id, released_at);
CREATE INDEX uncertain_reservations_chat_id
  ON uncertain_reservations (chat_id, uncertain_at);
CREATE INDEX ended_reservations_chat_not_committed
  ON ended_reservations (chat_id, ended_at) WHERE status <> 'committed';
