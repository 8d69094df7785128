-- Issue 8, item 12: an instance id belongs to one live process. process is
-- a random id of the process start holding the id (also the origin of its
-- event notifications); a second process finding a fresh heartbeat of
-- another process under its id refuses to start. Keep in step with
-- ../../postgres/migrations/0005_instance_process.sql.
ALTER TABLE instances ADD COLUMN process TEXT NOT NULL DEFAULT '';
