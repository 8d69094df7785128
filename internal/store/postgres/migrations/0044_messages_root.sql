-- A root agent's transcript: the session's newest root-level messages,
-- walked backward through an index and cut at a byte bound. Keep the index
-- in step with ../../sqlite/migrations/0044_messages_root.sql.
--
-- Asked as a plain statement, the plan followed the statistics: for a
-- session they take to be short (one that grew since the last ANALYZE, or
-- simply one far longer than the average), the planner read every row of
-- the session by bitmap and sorted them — 4 ms at 4,000 turns, growing with
-- the session — where the ordered walk reads the 200 newest and stops
-- (0.07 ms). The function plans its one statement with bitmap scans off, so
-- the walk is the plan whatever the statistics say; messages_root carries
-- the condition on parent_run_id, so no row is read only to be dropped.
CREATE INDEX messages_root ON messages(session_id, message_id) WHERE parent_run_id = '';

-- The sizes are summed newest first (octet_length reads no content); only
-- the rows within p_budget, and the one across it, are returned, and a
-- content stored out of line is fetched only for those. Oldest first.
CREATE FUNCTION agentplane_transcript(p_session text, p_limit int, p_budget bigint)
RETURNS TABLE (message_id text, session_id text, run_id text, agent_id text, parent_run_id text, intention_id text, role text, content text, created_at bigint)
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
BEGIN
	RETURN QUERY
	SELECT sized.message_id, sized.session_id, sized.run_id, sized.agent_id, sized.parent_run_id, sized.intention_id,
		sized.role, sized.content, sized.created_at
	FROM (
		SELECT newest.message_id, newest.session_id, newest.run_id, newest.agent_id, newest.parent_run_id, newest.intention_id,
			newest.role, newest.content, newest.created_at,
			SUM(octet_length(newest.content)) OVER (ORDER BY newest.session_id DESC, newest.message_id DESC ROWS UNBOUNDED PRECEDING) - octet_length(newest.content) AS before
		FROM (SELECT m.message_id, m.session_id, m.run_id, m.agent_id, m.parent_run_id, m.intention_id, m.role, m.content, m.created_at
			FROM messages m
			WHERE m.session_id >= p_session AND m.session_id <= p_session AND m.parent_run_id = ''
			ORDER BY m.session_id DESC, m.message_id DESC LIMIT p_limit) newest
	) sized
	WHERE sized.before <= p_budget
	ORDER BY sized.message_id;
END
$$;
