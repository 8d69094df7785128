-- A run's start sent without waiting for anything, in a session this
-- process saw last: its start reads the session's row (locking it) and
-- the session's newest run first (store.Queries.SessionGetForRunLatest),
-- to decide whether the new run answers one that asked for input and
-- which remote task it continues — a round trip before the run's INSERT
-- and events can be sent. Where the process knows what those reads would
-- find (it started, and saw end, the session's newest run), it sends this
-- instead, with the INSERT, the events and the COMMIT: it takes the same
-- lock and checks the same rows, and fails the transaction (SQLSTATE
-- AP003: store.ErrSessionMoved) if the session is not as it was seen; the
-- event log then runs it again, reading first (eventlog.Assume).
--
-- The newest run is RunLatest's, with the same order.
CREATE FUNCTION agentplane_session_as_seen(p_session TEXT, p_user TEXT, p_root_only BOOLEAN, p_agent TEXT,
	p_run TEXT, p_status TEXT) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	owner TEXT;
	latest_run TEXT;
	latest_status TEXT;
BEGIN
	SELECT user_id INTO owner FROM sessions WHERE session_id = p_session FOR UPDATE;
	IF NOT FOUND OR owner <> p_user OR EXISTS (SELECT 1 FROM session_purges WHERE session_id = p_session) THEN
		RAISE EXCEPTION 'session % is not as it was seen', p_session USING ERRCODE = 'AP003';
	END IF;
	SELECT run_id, status INTO latest_run, latest_status FROM runs
		WHERE session_id >= p_session AND session_id <= p_session
			AND (NOT p_root_only OR parent_run_id = '') AND (p_agent = '' OR agent_id = p_agent)
		ORDER BY session_id DESC, started_at DESC, run_id DESC LIMIT 1;
	IF NOT FOUND OR latest_run <> p_run OR latest_status <> p_status THEN
		RAISE EXCEPTION 'the newest run of session % is not as it was seen', p_session USING ERRCODE = 'AP003';
	END IF;
END
$$;
