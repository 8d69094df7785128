-- A2A both ways (issue 10, DESIGN §12). Keep in step with
-- ../../postgres/migrations/0041_a2a.sql.
--
-- a2a: the agent is also served as an A2A agent at /a2a/{agent_id}.
-- protocol: how the platform speaks to the agent — 'agentplane' (POST
-- {endpoint}/invoke, SSE) or 'a2a' (a remote A2A agent, whose card, fetched
-- at registration, is a2a_card).
ALTER TABLE agents ADD COLUMN a2a INTEGER NOT NULL DEFAULT 0 CHECK (a2a IN (0, 1));
ALTER TABLE agents ADD COLUMN protocol TEXT NOT NULL DEFAULT 'agentplane' CHECK (protocol IN ('agentplane', 'a2a'));
ALTER TABLE agents ADD COLUMN a2a_card TEXT;
