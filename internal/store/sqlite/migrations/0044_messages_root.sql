-- messages_root: a session's root-level messages (a root agent's transcript)
-- in order, without a filter on each row. Keep in step with
-- ../../postgres/migrations/0044_messages_root.sql, which explains it.
CREATE INDEX messages_root ON messages(session_id, message_id) WHERE parent_run_id = '';
