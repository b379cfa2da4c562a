-- The tables: chats with their pockets, one active reservation per chat, the
-- ledger of commits and purchases, and the reservations the sweeper released.
-- Squashed from 0.1's migrations 001_core ... 010_receipts_without_join,
-- which stay as a test fixture; a test proves both give the same schema.

CREATE TABLE chats (
  chat_id           bigint PRIMARY KEY,            -- negative for group chats
  daily_messages    integer NOT NULL DEFAULT 0 CHECK (daily_messages >= 0),
  daily_images      integer NOT NULL DEFAULT 0 CHECK (daily_images >= 0),
  balance           integer NOT NULL DEFAULT 0 CHECK (balance >= 0),
  premium_until     timestamptz NULL,              -- NULL: never premium
  window_started_at timestamptz NULL,              -- NULL: no window is open
  last_activity_at  timestamptz NULL,
  started           boolean NOT NULL DEFAULT false,
  blocked           boolean NOT NULL DEFAULT false,
  banned            boolean NOT NULL DEFAULT false,
  created_at        timestamptz NOT NULL DEFAULT now(),
  -- When the reactivation scan last refilled this chat; it is due again only
  -- after new activity (reactivated_at < last_activity_at).
  reactivated_at    timestamptz NULL
);

-- The reactivation scan walks exactly the chats it may refill, oldest
-- activity first: started, not blocked or banned, not yet reactivated in the
-- current idle period.
CREATE INDEX chats_reactivation ON chats (last_activity_at, chat_id)
  WHERE started AND NOT blocked AND NOT banned
    AND last_activity_at IS NOT NULL
    AND (reactivated_at IS NULL OR reactivated_at < last_activity_at);

-- A reservation is both the hold (the price decided at reserve time) and the
-- chat's lock: UNIQUE (chat_id) is what makes one active job per chat. Its
-- chat is checked by the reference triggers below, not by a foreign key.
CREATE TABLE reservations (
  id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  chat_id             bigint NOT NULL UNIQUE,
  kind                text NOT NULL CHECK (kind IN ('text', 'image')),
  status              text NOT NULL DEFAULT 'queued'
                        CHECK (status IN ('queued', 'in_progress')),
  held_daily_messages integer NOT NULL CHECK (held_daily_messages >= 0),
  held_daily_images   integer NOT NULL CHECK (held_daily_images >= 0),
  held_balance        integer NOT NULL CHECK (held_balance >= 0),
  queue               text NOT NULL,
  request_id          text NOT NULL DEFAULT '',
  created_at          timestamptz NOT NULL DEFAULT now(),
  started_at          timestamptz NULL,
  -- NULL until the first heartbeat: then the deadline is the earlier of the
  -- lease and created_at + sweep-timeout.
  lease_expires_at    timestamptz NULL
);

-- The sweeper walks reservations by age.
CREATE INDEX reservations_created_at ON reservations (created_at);
-- The sweeper's lease pass; rows without a lease are not in it.
CREATE INDEX reservations_lease_expires_at ON reservations (lease_expires_at)
  WHERE lease_expires_at IS NOT NULL;

-- One row per commit or purchase: the audit trail. The unique reservation_id
-- makes a repeated commit return the first receipt instead of charging again;
-- payment_id does the same for a retried purchase webhook.
CREATE TABLE ledger (
  id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  reservation_id         bigint NULL UNIQUE,
  chat_id                bigint NOT NULL,
  kind                   text NULL CHECK (kind IN ('text', 'image')),
  charged_daily_messages integer NOT NULL CHECK (charged_daily_messages >= 0),
  charged_daily_images   integer NOT NULL CHECK (charged_daily_images >= 0),
  charged_balance        integer NOT NULL CHECK (charged_balance >= 0),
  committed_at           timestamptz NOT NULL DEFAULT now(),
  entry                  text NOT NULL DEFAULT 'charge'
                           CHECK (entry IN ('charge', 'top_up')),
  payment_id             text NULL,
  credited_balance       integer NOT NULL DEFAULT 0
                           CHECK (credited_balance >= 0),
  CONSTRAINT ledger_entry_shape CHECK (
    (entry = 'charge' AND reservation_id IS NOT NULL AND kind IS NOT NULL
      AND payment_id IS NULL)
    OR (entry = 'top_up' AND reservation_id IS NULL AND payment_id IS NOT NULL
      AND credited_balance > 0))
);

CREATE INDEX ledger_chat_committed_at ON ledger (chat_id, committed_at);
-- Only top-ups carry a payment_id: a partial index keeps the guarantee
-- without an index entry per charge.
CREATE UNIQUE INDEX ledger_payment_id ON ledger (payment_id)
  WHERE payment_id IS NOT NULL;

-- Remembered after release, so that a late start, heartbeat or commit
-- answers `expired`.
CREATE TABLE released_reservations (
  id          bigint PRIMARY KEY,                 -- the reservation's id
  chat_id     bigint NOT NULL,
  reason      text NOT NULL CHECK (reason IN ('lease_expired', 'sweep_timeout')),
  released_at timestamptz NOT NULL DEFAULT now()
);

-- Pruning after release-retention walks this index.
CREATE INDEX released_reservations_released_at
  ON released_reservations (released_at);

-- References to chats --------------------------------------------------------
-- Triggers instead of foreign keys: a foreign key runs a query per inserted
-- row. chargeonce_apply_batch inserts only for chats it locked and read, so
-- it sets chargeonce.references_checked and the insert triggers skip their
-- check; every other writer is checked as a foreign key would check it, and
-- a violation raises foreign_key_violation (23503) with the old constraint
-- names. Deleting a chat deletes its reservations and is refused while
-- ledger rows name it; renumbering a chat is refused while rows name it;
-- TRUNCATE chats is refused while reservations or ledger hold rows.

-- NEW.chat_id exists; locked FOR KEY SHARE like a foreign key's check.
CREATE FUNCTION chargeonce_check_chat_reference() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM chats WHERE chat_id = NEW.chat_id FOR KEY SHARE;
  IF NOT FOUND THEN
    RAISE foreign_key_violation USING
      MESSAGE = format('insert or update on table "%s" violates foreign key '
                       'constraint "%s_chat_id_fkey"', TG_TABLE_NAME,
                       TG_TABLE_NAME),
      DETAIL = format('Key (chat_id)=(%s) is not present in table "chats".',
                      NEW.chat_id),
      TABLE = TG_TABLE_NAME, CONSTRAINT = TG_TABLE_NAME || '_chat_id_fkey';
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER reservations_chat_reference BEFORE INSERT ON reservations
  FOR EACH ROW
  WHEN (current_setting('chargeonce.references_checked', true)
          IS DISTINCT FROM 'on')
  EXECUTE FUNCTION chargeonce_check_chat_reference();
CREATE TRIGGER ledger_chat_reference BEFORE INSERT ON ledger
  FOR EACH ROW
  WHEN (current_setting('chargeonce.references_checked', true)
          IS DISTINCT FROM 'on')
  EXECUTE FUNCTION chargeonce_check_chat_reference();

-- AFTER row triggers on the one column: a BEFORE UPDATE row trigger would
-- lock every updated row first, and the hot UPDATEs (start, the pockets at
-- commit) never name chat_id, so these are not queued there.
CREATE TRIGGER reservations_chat_changed
  AFTER UPDATE OF chat_id ON reservations FOR EACH ROW
  WHEN (OLD.chat_id IS DISTINCT FROM NEW.chat_id)
  EXECUTE FUNCTION chargeonce_check_chat_reference();
CREATE TRIGGER ledger_chat_changed AFTER UPDATE OF chat_id ON ledger
  FOR EACH ROW WHEN (OLD.chat_id IS DISTINCT FROM NEW.chat_id)
  EXECUTE FUNCTION chargeonce_check_chat_reference();

-- Refuses to delete or renumber `chat` because table `t` names it.
CREATE FUNCTION chargeonce_chat_still_referenced(t text, chat bigint)
  RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE foreign_key_violation USING
    MESSAGE = format('update or delete on table "chats" violates foreign key '
                     'constraint "%s_chat_id_fkey" on table "%s"', t, t),
    DETAIL = format('Key (chat_id)=(%s) is still referenced from table '
                    '"%s".', chat, t),
    TABLE = t, CONSTRAINT = t || '_chat_id_fkey';
END $$;

-- Deleting chats: refused while ledger rows name one of them (the audit
-- trail keeps its chats); their reservations go with them. One check per
-- statement: a bulk delete (the bench's cleanup) is not a trigger per row.
CREATE FUNCTION chargeonce_chats_deleted() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  referenced bigint;
BEGIN
  SELECT min(l.chat_id) INTO referenced
    FROM old_rows o JOIN ledger l ON l.chat_id = o.chat_id;
  IF referenced IS NOT NULL THEN
    PERFORM chargeonce_chat_still_referenced('ledger', referenced);
  END IF;
  DELETE FROM reservations r USING old_rows o WHERE r.chat_id = o.chat_id;
  RETURN NULL;
END $$;

CREATE TRIGGER chats_deleted AFTER DELETE ON chats
  REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION chargeonce_chats_deleted();

-- Changing a chat's id: refused while a reservation or ledger row names it.
CREATE FUNCTION chargeonce_chat_id_changed() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM ledger WHERE chat_id = OLD.chat_id) THEN
    PERFORM chargeonce_chat_still_referenced('ledger', OLD.chat_id);
  ELSIF EXISTS (SELECT 1 FROM reservations WHERE chat_id = OLD.chat_id) THEN
    PERFORM chargeonce_chat_still_referenced('reservations', OLD.chat_id);
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER chats_chat_id_changed AFTER UPDATE OF chat_id ON chats
  FOR EACH ROW WHEN (OLD.chat_id IS DISTINCT FROM NEW.chat_id)
  EXECUTE FUNCTION chargeonce_chat_id_changed();

-- A foreign key refused it too, unless the referencing tables were truncated
-- in the same command.
CREATE FUNCTION chargeonce_chats_truncated() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM reservations) OR EXISTS (SELECT 1 FROM ledger) THEN
    RAISE foreign_key_violation USING
      MESSAGE = 'cannot truncate chats while reservations or ledger hold '
                'rows (truncate them first)',
      TABLE = 'chats', CONSTRAINT = 'chats_referenced';
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER chats_truncated BEFORE TRUNCATE ON chats
  FOR EACH STATEMENT EXECUTE FUNCTION chargeonce_chats_truncated();
