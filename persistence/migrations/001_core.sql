-- The core schema: chats with their pockets, one active reservation per
-- chat, and the ledger of commits.

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
  created_at        timestamptz NOT NULL DEFAULT now()
);

-- A reservation is both the hold (the price decided at reserve time) and the
-- chat's lock: UNIQUE (chat_id) is what makes one active job per chat.
CREATE TABLE reservations (
  id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  chat_id             bigint NOT NULL UNIQUE
                        REFERENCES chats (chat_id) ON DELETE CASCADE,
  kind                text NOT NULL CHECK (kind IN ('text', 'image')),
  status              text NOT NULL DEFAULT 'queued'
                        CHECK (status IN ('queued', 'in_progress')),
  held_daily_messages integer NOT NULL CHECK (held_daily_messages >= 0),
  held_daily_images   integer NOT NULL CHECK (held_daily_images >= 0),
  held_balance        integer NOT NULL CHECK (held_balance >= 0),
  queue               text NOT NULL,
  request_id          text NOT NULL DEFAULT '',
  created_at          timestamptz NOT NULL DEFAULT now(),
  started_at          timestamptz NULL
);

-- The sweeper walks reservations by age: index it from day one.
CREATE INDEX reservations_created_at ON reservations (created_at);

-- One row per commit: the audit trail, and what makes a repeated commit
-- return the first receipt instead of charging again.
CREATE TABLE ledger (
  id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  reservation_id         bigint NOT NULL UNIQUE,
  chat_id                bigint NOT NULL REFERENCES chats (chat_id),
  kind                   text NOT NULL CHECK (kind IN ('text', 'image')),
  charged_daily_messages integer NOT NULL CHECK (charged_daily_messages >= 0),
  charged_daily_images   integer NOT NULL CHECK (charged_daily_images >= 0),
  charged_balance        integer NOT NULL CHECK (charged_balance >= 0),
  committed_at           timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX ledger_chat_committed_at ON ledger (chat_id, committed_at);
