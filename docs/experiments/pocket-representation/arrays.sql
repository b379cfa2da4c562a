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
ALTER TABLE uncertain_reservations ADD COLUMN hv integer[];

-- The general paths of the arrays_general variant, which the bench never
-- takes: present so that the statements pay for having them.
CREATE FUNCTION experiment_choose_general(spec jsonb, premium boolean,
                                          pv integer[], chat bigint,
                                          units integer)
  RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'experiment: general choice for chat %', chat;
END $$;
CREATE FUNCTION experiment_charge_general(pv integer[], hv integer[],
                                          units integer, named integer)
  RETURNS integer[] LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'experiment: general charge';
END $$;
CREATE FUNCTION experiment_after_general(pv integer[], hv integer[],
                                         units integer, named integer)
  RETURNS integer[] LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'experiment: general pockets after a charge';
END $$;
