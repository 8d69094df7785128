-- The event log's check that the runs whose output a transaction appends
-- are still active, sent without waiting for its answer: a pipelined
-- transaction's BEGIN, this check, the events and the rest go to the
-- server together, one round trip fewer than asking first. Like the read
-- it stands in for (RunsEnded), it share-locks the runs, so an end
-- committed elsewhere comes before this transaction or after it; if one
-- has ended, it fails the transaction (SQLSTATE AP001: store.ErrRunEnded)
-- and the log runs it again, asking first (eventlog.assertActive).
--
-- The ended runs are counted by an aggregate over the locked rows: a
-- condition on the status next to FOR SHARE (an EXISTS … WHERE status IN)
-- is pushed below the lock, which then takes only the ended runs' rows.
CREATE FUNCTION agentplane_runs_active(ids TEXT[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	ended BIGINT;
BEGIN
	SELECT count(*) FILTER (WHERE status IN ('DONE', 'FAILED', 'CANCELLED', 'INPUT_REQUIRED')) INTO ended
		FROM (SELECT status FROM runs WHERE run_id = ANY(ids) FOR SHARE) r;
	IF ended > 0 THEN
		RAISE EXCEPTION 'a run whose output this transaction appends has ended' USING ERRCODE = 'AP001';
	END IF;
END
$$;
