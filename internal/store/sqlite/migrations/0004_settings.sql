-- Small key/value settings kept with the database: the credentials
-- `serve --demo` generates on its first start and prints at every start,
-- so an open chat tab and exported keys survive a restart (issue 8 item 16).
-- Keep in step with ../../postgres/migrations/0004_settings.sql.
--
-- A value is written once (INSERT … ON CONFLICT DO NOTHING) and never
-- changed; processes starting together read back the one that won.
CREATE TABLE settings (
  name       TEXT PRIMARY KEY,
  value      TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
