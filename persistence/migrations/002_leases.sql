-- Leases and fencing: a started job's heartbeat extends its lease; the
-- sweeper releases reservations past their deadline and remembers them for
-- a while, so that a late start, heartbeat or commit answers `expired`.

-- NULL until the first heartbeat: then the deadline is the earlier of the
-- lease and created_at + sweep-timeout.
ALTER TABLE reservations ADD COLUMN lease_expires_at timestamptz NULL;

-- The sweeper's lease pass walks this index; rows without a lease are not in it.
CREATE INDEX reservations_lease_expires_at ON reservations (lease_expires_at)
  WHERE lease_expires_at IS NOT NULL;

CREATE TABLE released_reservations (
  id          bigint PRIMARY KEY,                 -- the reservation's id
  chat_id     bigint NOT NULL,
  reason      text NOT NULL CHECK (reason IN ('lease_expired', 'sweep_timeout')),
  released_at timestamptz NOT NULL DEFAULT now()
);

-- Pruning after release-retention walks this index.
CREATE INDEX released_reservations_released_at
  ON released_reservations (released_at);
