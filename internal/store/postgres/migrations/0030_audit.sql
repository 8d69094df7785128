-- Governance, issue 14 (DESIGN §15): the audit log. Keep in step with
-- ../../sqlite/migrations/0030_audit.sql.
--
-- One row per administrative action — who (actor: "admin", "user:<id>",
-- "agent:<id>", "config", "retention"), what (action, e.g. "tool.put"), on
-- what (target) and when (ts, ms), with detail as JSON text. Rows are
-- written in the transaction of the change they record and never change:
-- the trigger refuses UPDATE and DELETE (TRUNCATE too).
CREATE TABLE audit (
  audit_id TEXT PRIMARY KEY,
  actor    TEXT NOT NULL,
  action   TEXT NOT NULL,
  target   TEXT NOT NULL DEFAULT '',
  ts       BIGINT NOT NULL,
  detail   TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_ts ON audit(ts, audit_id);
CREATE INDEX audit_actor ON audit(actor, ts, audit_id);
CREATE INDEX audit_action ON audit(action, ts, audit_id);
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit rows are append-only';
END $$;
CREATE TRIGGER audit_no_change BEFORE UPDATE OR DELETE ON audit FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
