-- agentplane:edits-schema
-- Input required (issue 10, DESIGN §12). Keep in step with
-- ../../postgres/migrations/0040_input_required.sql.
--
-- INPUT_REQUIRED is a run's final status when its agent ends its turn asking
-- the user: terminal (ended_at set, never active), not a failure. The two
-- CHECKs on runs.status list the statuses; SQLite changes a CHECK only by
-- rebuilding the table or by editing its stored definition. A rebuild must
-- name every column, and other migrations may add columns to runs, so the
-- definition is edited instead, adding the status to both lists — the
-- documented procedure for loosening a constraint that existing rows already
-- satisfy (https://www.sqlite.org/lang_altertable.html#otheralter). The
-- migration runner bumps schema_version in the same transaction (the
-- edits-schema line above), so every connection rereads the schema.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
  SET sql = replace(sql, '''DONE'',''FAILED'',''CANCELLED''', '''DONE'',''FAILED'',''CANCELLED'',''INPUT_REQUIRED''')
  WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = OFF;

-- Every root run belongs to an intention (seed 004): a run that answers an
-- INPUT_REQUIRED run (resumes_run_id) keeps its intention_id; a child run
-- inherits its parent's. question and question_detail are what an
-- INPUT_REQUIRED run asked. A run is answered at most once, whoever races.
ALTER TABLE runs ADD COLUMN intention_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN resumes_run_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN question TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN question_detail TEXT;
CREATE UNIQUE INDEX runs_resumes ON runs(resumes_run_id) WHERE resumes_run_id <> '';
CREATE INDEX runs_intention ON runs(intention_id, started_at) WHERE intention_id <> '';

-- Transcript rows say which intention they belong to.
ALTER TABLE messages ADD COLUMN intention_id TEXT NOT NULL DEFAULT '';
