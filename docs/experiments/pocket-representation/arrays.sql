-- SPDX-License-Identifier: Apache-2.0
-- The columns the `arrays` variant of variants.py works on, beside the
-- jsonb ones: a chat's pockets (pv), a hold's pocket ordinal and amounts
-- (hp, hv), a charge's amounts and the pockets after it (cv, av), indexed
-- by ordinal: 1 daily_messages, 2 daily_images, 3 balance. Seeded chats get
-- pv from their jsonb pockets by a trigger. For a scratch bench cluster only.
ALTER TABLE chats ADD COLUMN pv integer[] NOT NULL DEFAULT '{}'
  CHECK (0 <= ALL (pv));
ALTER TABLE reservations ADD COLUMN hp smallint, ADD COLUMN hv integer[];
ALTER TABLE ledger ADD COLUMN cv integer[], ADD COLUMN av integer[];

CREATE FUNCTION experiment_pockets_by_ordinal() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  NEW.pv := ARRAY[chargeonce_amount(NEW.pockets, 'daily_messages'),
                  chargeonce_amount(NEW.pockets, 'daily_images'),
                  chargeonce_amount(NEW.pockets, 'balance')];
  RETURN NEW;
END $$;
CREATE TRIGGER experiment_pockets_by_ordinal BEFORE INSERT ON chats
  FOR EACH ROW EXECUTE FUNCTION experiment_pockets_by_ordinal();
