-- References to chats without a foreign key check per inserted row.
--
-- A foreign key checks each inserted row with its own query (an executor
-- started and stopped per row): with a reservation and a ledger row per
-- cycle that was 18 % of the backend's CPU in a batch. Measured with
-- chargeonce-bench --persistence=11,32 (batches of 11 and 32 cycles): 62 and
-- 45 µs of Postgres CPU per cycle with the foreign keys, 51 and 37 without.
-- (Statement-level triggers with transition tables, one check per batch,
-- still cost 59 and 41: capturing the rows and a trigger call per
-- statement.)
--
-- chargeonce_apply_batch inserts reservation and ledger rows only for chats
-- it locked FOR UPDATE and read at the start of its statement (unknown
-- chats are refused with not_found), so it declares
-- chargeonce.references_checked for its own duration and the row triggers
-- below skip their check. Every other writer (the one-operation functions
-- outside a batch, an admin script) is checked as a foreign key would:
--   - a reservation or ledger row names an existing chat, locked FOR KEY
--     SHARE until the writer commits, so a concurrent delete of the chat
--     waits, then sees the new row;
--   - deleting a chat deletes its reservations (ON DELETE CASCADE before)
--     and is refused while ledger rows name it (NO ACTION before);
--   - changing a chat's id is refused while rows name it; changing the
--     chat a reservation or ledger row names checks the new one;
--   - TRUNCATE chats is refused while reservations or ledger hold rows
--     (truncate them first; a foreign key refused it unless they were
--     truncated in the same command).
-- Violations raise foreign_key_violation (23503) with the old constraint
-- names.

ALTER TABLE reservations DROP CONSTRAINT reservations_chat_id_fkey;
ALTER TABLE ledger DROP CONSTRAINT ledger_chat_id_fkey;

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

ALTER FUNCTION chargeonce_apply_batch(text[], bigint[], bigint[], text[],
                                      text[], bigint)
  SET chargeonce.references_checked = 'on';
