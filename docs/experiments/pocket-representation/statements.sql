-- SPDX-License-Identifier: Apache-2.0
-- 2,000 batches of chargeonce_apply_batch on one connection, each 10
-- reserves, 10 starts and 10 commits of 1,000 chats with credits only
-- (paid from balance, the built-in image's second pocket), for
-- pg_stat_statements to time the batch function's statements. Run by
-- statements.sh; psql variable `arrays` (on/off) seeds the arrays
-- variant's pv too.
SET statement_timeout = 0;
SET experiment.catalog = '{"image": {"pay": [["daily_images", 1], ["balance", 1]], "free": false, "q": "image_generation", "pq": "image_generation_priority", "cancel": "refuse", "refusal": "insufficient_images", "why": "image"}, "text": {"pay": [["daily_messages", 1]], "free": true, "q": "text_generation", "pq": "text_generation_priority", "cancel": "refuse", "refusal": "insufficient_messages", "why": "text"}}';
SET chargeonce.references_checked = 'on';
DELETE FROM ledger WHERE chat_id BETWEEN 9000001 AND 9001000;
DELETE FROM reservations WHERE chat_id BETWEEN 9000001 AND 9001000;
DELETE FROM chats WHERE chat_id BETWEEN 9000001 AND 9001000;
INSERT INTO chats (chat_id, pockets)
SELECT 9000000 + g, '{"balance": 100000, "daily_images": 0, "daily_messages": 0}'
  FROM generate_series(1, 1000) AS g;
RESET chargeonce.references_checked;

CREATE TEMP TABLE batch (op text, chat bigint, id bigint);
CREATE TEMP TABLE round (n integer);
INSERT INTO round VALUES (0);
-- Next batch: commit what was started, start what was queued, reserve 10.
CREATE FUNCTION pg_temp.next_batch() RETURNS void LANGUAGE sql AS $$
  TRUNCATE batch;
  INSERT INTO batch
  SELECT CASE status WHEN 'in_progress' THEN 'commit' ELSE 'start' END,
         chat_id, id
    FROM reservations WHERE chat_id BETWEEN 9000001 AND 9001000;
  INSERT INTO batch
  SELECT 'reserve', 9000001 + ((SELECT n FROM round) * 10 + g) % 1000, 0
    FROM generate_series(0, 9) AS g;
  UPDATE round SET n = n + 1;
$$;
CREATE FUNCTION pg_temp.apply() RETURNS bigint LANGUAGE sql AS $$
  SELECT count(*) FROM chargeonce_apply_batch(
    ARRAY(SELECT op FROM batch ORDER BY chat),
    ARRAY(SELECT chat FROM batch ORDER BY chat),
    ARRAY(SELECT id FROM batch ORDER BY chat),
    ARRAY(SELECT 'image'::text FROM batch), ARRAY(SELECT ''::text FROM batch),
    ARRAY(SELECT 1 FROM batch), 60000, 1, 1,
    current_setting('experiment.catalog')::jsonb)
$$;
-- Each batch its own transaction, as the server sends them.
DO $$
BEGIN
  FOR i IN 1 .. 2000 LOOP
    PERFORM pg_temp.next_batch();
    PERFORM pg_temp.apply();
    COMMIT;
  END LOOP;
END $$;
