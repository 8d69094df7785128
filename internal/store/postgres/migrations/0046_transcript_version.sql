-- A session's transcript version: how many root-level messages have been
-- added to it since this migration. Keep in step with
-- ../../sqlite/migrations/0046_transcript_version.sql, which says why.
ALTER TABLE sessions ADD COLUMN transcript_version BIGINT NOT NULL DEFAULT 0;

CREATE FUNCTION messages_root_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE sessions SET transcript_version = transcript_version + 1 WHERE session_id = NEW.session_id;
	RETURN NULL;
END
$$;

CREATE TRIGGER messages_root_version AFTER INSERT ON messages FOR EACH ROW
	WHEN (NEW.parent_run_id = '') EXECUTE FUNCTION messages_root_version();
