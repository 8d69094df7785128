-- The call_<agent> tool kind (issue 9, DESIGN §11). Keep in step with
-- ../../sqlite/migrations/0007_agent_tool_calls.sql, which explains the rules.
--
-- The constraints being replaced were created unnamed in 0002; they are
-- found by what they say, and the new ones are named.
DO $$
DECLARE c record;
BEGIN
  FOR c IN
    SELECT conname FROM pg_constraint
    WHERE conrelid = 'tool_calls'::regclass AND contype = 'c'
      AND (pg_get_constraintdef(oid) LIKE '%kind%'
           OR pg_get_constraintdef(oid) LIKE '%deadline_at IS NOT NULL%'
           OR pg_get_constraintdef(oid) LIKE '%timeout_ms > 0%')
  LOOP
    EXECUTE format('ALTER TABLE tool_calls DROP CONSTRAINT %I', c.conname);
  END LOOP;
END $$;
ALTER TABLE tool_calls
  ADD CONSTRAINT tool_calls_kind CHECK (kind IN ('server','client','agent')),
  ADD CONSTRAINT tool_calls_waiting_deadline CHECK (
    status NOT IN ('WAITING_APPROVAL','DISPATCHED','RUNNING','WAITING_CLIENT') OR deadline_at IS NOT NULL
    OR (kind = 'agent' AND status = 'RUNNING' AND timeout_ms = 0)),
  ADD CONSTRAINT tool_calls_timeout CHECK (timeout_ms > 0 OR (kind = 'agent' AND timeout_ms = 0));
