-- Input required (issue 10, DESIGN §12). Keep in step with
-- ../../sqlite/migrations/0040_input_required.sql, which explains the columns.
--
-- The status CHECKs list the statuses; each one naming CANCELLED is
-- recreated (same name) with INPUT_REQUIRED added next to it, whatever else
-- other migrations put in it, so this edit does not depend on them.
DO $$
DECLARE c record;
BEGIN
  FOR c IN
    SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
    WHERE conrelid = 'runs'::regclass AND contype = 'c'
      AND pg_get_constraintdef(oid) LIKE '%''CANCELLED''::text%'
      AND pg_get_constraintdef(oid) NOT LIKE '%INPUT_REQUIRED%'
  LOOP
    EXECUTE format('ALTER TABLE runs DROP CONSTRAINT %I', c.conname);
    EXECUTE format('ALTER TABLE runs ADD CONSTRAINT %I %s', c.conname,
      replace(c.def, '''CANCELLED''::text', '''CANCELLED''::text, ''INPUT_REQUIRED''::text'));
  END LOOP;
END $$;

ALTER TABLE runs
  ADD COLUMN intention_id TEXT NOT NULL DEFAULT '',
  ADD COLUMN resumes_run_id TEXT NOT NULL DEFAULT '',
  ADD COLUMN question TEXT NOT NULL DEFAULT '',
  ADD COLUMN question_detail TEXT;
CREATE UNIQUE INDEX runs_resumes ON runs(resumes_run_id) WHERE resumes_run_id <> '';
CREATE INDEX runs_intention ON runs(intention_id, started_at) WHERE intention_id <> '';

ALTER TABLE messages ADD COLUMN intention_id TEXT NOT NULL DEFAULT '';
