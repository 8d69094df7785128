-- A session's transcript version: how many root-level messages have been
-- added to it since this migration. Keep in step with
-- ../../postgres/migrations/0046_transcript_version.sql.
--
-- A run manager keeps the transcripts it read in memory (run/transcriptcache.go)
-- and, for the next run of the session, reads only the messages newer than
-- the newest it holds, with this version, in one statement: when the version
-- grew by exactly the number of newer messages, nothing was added among the
-- older ones (an id is made before its transaction commits, so a message can
-- commit after a newer one) and the copy is still the transcript. Only the
-- difference is compared, so existing sessions start at 0.
--
-- A trigger, so that every insert counts — the runs' own, POST
-- /sessions/{id}/messages, anything added later — in the insert's
-- transaction.
ALTER TABLE sessions ADD COLUMN transcript_version INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER messages_root_version AFTER INSERT ON messages WHEN NEW.parent_run_id = ''
BEGIN
	UPDATE sessions SET transcript_version = transcript_version + 1 WHERE session_id = NEW.session_id;
END;
