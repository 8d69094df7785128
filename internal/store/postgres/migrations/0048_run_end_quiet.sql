-- A run's end sent without waiting for anything, for a run expected to be
-- quiet: no child run, no tool call left open, no LLM call. Ending a run
-- reads first whether it is (store.RunOutlook), since each of those adds
-- work to the end (descendants ended, calls settled, the cost summed) —
-- a round trip before the end's events can be sent. A run of a remote A2A
-- agent is quiet as a rule; its end sends this, the events and the COMMIT
-- at once. If the run was not active or not quiet, the transaction fails
-- (SQLSTATE AP002: store.ErrRunNotQuiet) and the event log runs it again,
-- reading first (eventlog.Assume).
--
-- The UPDATE is RunTransition's; the three EXISTS are runOutlook's, with
-- the same predicates so the same indexes serve them.
CREATE FUNCTION agentplane_run_end_quiet(p_run_id TEXT, p_session_id TEXT, p_status TEXT, p_ended_at BIGINT,
	p_error TEXT, p_usage TEXT, p_question TEXT, p_question_detail TEXT, p_from TEXT[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	UPDATE runs SET status = p_status, ended_at = p_ended_at, error = COALESCE(p_error, error), usage = COALESCE(p_usage, usage),
		question = COALESCE(p_question, question), question_detail = COALESCE(p_question_detail, question_detail)
		WHERE run_id = p_run_id AND status = ANY(p_from);
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % is not active', p_run_id USING ERRCODE = 'AP002';
	END IF;
	IF EXISTS (SELECT 1 FROM runs WHERE parent_run_id = p_run_id AND parent_run_id <> '')
		OR EXISTS (SELECT 1 FROM tool_calls WHERE run_id = p_run_id AND ended_at IS NULL)
		OR EXISTS (SELECT 1 FROM events WHERE run_id = p_run_id AND type NOT IN ('agent_stream_delta', 'sub_agent_partial') AND type = 'llm_call_done' AND session_id = p_session_id) THEN
		RAISE EXCEPTION 'run % is not quiet', p_run_id USING ERRCODE = 'AP002';
	END IF;
END
$$;
