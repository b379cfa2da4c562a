-- SPDX-License-Identifier: Apache-2.0
-- Chat references: the triggers of 001 that keep every row of a chat pointing
-- at a chat that exists (foreign keys would lock chats in an order no writer
-- chose).
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

-- Refuses to delete or renumber `chat` because table `t` names it.
CREATE OR REPLACE FUNCTION chargeonce_chat_still_referenced(t text, chat bigint)
  RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE foreign_key_violation USING
    MESSAGE = format('update or delete on table "chats" violates foreign key '
                     'constraint "%s_chat_id_fkey" on table "%s"', t, t),
    DETAIL = format('Key (chat_id)=(%s) is still referenced from table '
                    '"%s".', chat, t),
    TABLE = t, CONSTRAINT = t || '_chat_id_fkey';
END $$;

-- Triggers instead of foreign keys: a foreign key runs a query per inserted
-- row. chargeonce_apply_batch inserts only for chats it locked and read, so
-- it sets chargeonce.references_checked and the insert triggers skip their
-- check; every other writer is checked as a foreign key would check it, and
-- a violation raises foreign_key_violation (23503) with the old constraint
-- names. Deleting a chat deletes its reservations and is refused while
-- ledger rows name it; renumbering a chat is refused while rows name it;
-- TRUNCATE chats is refused while reservations or ledger hold rows.

-- NEW.chat_id exists; locked FOR KEY SHARE like a foreign key's check.
CREATE OR REPLACE FUNCTION chargeonce_check_chat_reference() RETURNS trigger
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

-- Deleting chats: refused while ledger rows name one of them (the audit
-- trail keeps its chats); their reservations go with them. One check per
-- statement: a bulk delete (the bench's cleanup) is not a trigger per row.
CREATE OR REPLACE FUNCTION chargeonce_chats_deleted() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  referenced bigint;
BEGIN
  SELECT min(l.chat_id) INTO referenced
    FROM old_rows o JOIN ledger l ON l.chat_id = o.chat_id;
  IF referenced IS NOT NULL THEN
    PERFORM chargeonce_chat_still_referenced('ledger', referenced);
  END IF;
  SELECT min(g.chat_id) INTO referenced
    FROM old_rows o JOIN grants g ON g.chat_id = o.chat_id;
  IF referenced IS NOT NULL THEN
    PERFORM chargeonce_chat_still_referenced('grants', referenced);
  END IF;
  DELETE FROM reservations r USING old_rows o WHERE r.chat_id = o.chat_id;
  RETURN NULL;
END $$;

-- Changing a chat's id: refused while a reservation, ledger or grant row
-- names it.
CREATE OR REPLACE FUNCTION chargeonce_chat_id_changed() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM ledger WHERE chat_id = OLD.chat_id) THEN
    PERFORM chargeonce_chat_still_referenced('ledger', OLD.chat_id);
  ELSIF EXISTS (SELECT 1 FROM reservations WHERE chat_id = OLD.chat_id) THEN
    PERFORM chargeonce_chat_still_referenced('reservations', OLD.chat_id);
  ELSIF EXISTS (SELECT 1 FROM grants WHERE chat_id = OLD.chat_id) THEN
    PERFORM chargeonce_chat_still_referenced('grants', OLD.chat_id);
  END IF;
  RETURN NULL;
END $$;

-- A foreign key refused it too, unless the referencing tables were truncated
-- in the same command.
CREATE OR REPLACE FUNCTION chargeonce_chats_truncated() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM reservations) OR EXISTS (SELECT 1 FROM ledger)
     OR EXISTS (SELECT 1 FROM grants) THEN
    RAISE foreign_key_violation USING
      MESSAGE = 'cannot truncate chats while reservations, ledger or grants '
                'hold rows (truncate them first)',
      TABLE = 'chats', CONSTRAINT = 'chats_referenced';
  END IF;
  RETURN NULL;
END $$;

-- Grants name their chat as the ledger does (the triggers 001 made for
-- reservations and ledger, made here for the table 004 added; CREATE OR
-- REPLACE, like the functions, so that applying this file again changes
-- nothing). A chat with grants is neither deleted nor renumbered (above).
CREATE OR REPLACE TRIGGER grants_chat_reference BEFORE INSERT ON grants
  FOR EACH ROW
  WHEN (current_setting('chargeonce.references_checked', true)
          IS DISTINCT FROM 'on')
  EXECUTE FUNCTION chargeonce_check_chat_reference();

CREATE OR REPLACE TRIGGER grants_chat_changed
  AFTER UPDATE OF chat_id ON grants FOR EACH ROW
  WHEN (OLD.chat_id IS DISTINCT FROM NEW.chat_id)
  EXECUTE FUNCTION chargeonce_check_chat_reference();
