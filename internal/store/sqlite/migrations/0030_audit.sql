-- Governance, issue 14 (DESIGN §15): the audit log. Keep in step with
-- ../../postgres/migrations/0030_audit.sql.
--
-- One row per administrative action — who (actor: "admin", "user:<id>",
-- "agent:<id>", "config", "retention"), what (action, e.g. "tool.put"), on
-- what (target) and when (ts, ms), with detail as JSON text. Rows are
-- written in the transaction of the change they record and never change:
-- the triggers refuse UPDATE and DELETE.
CREATE TABLE audit (
  audit_id TEXT PRIMARY KEY,
  actor    TEXT NOT NULL,
  action   TEXT NOT NULL,
  target   TEXT NOT NULL DEFAULT '',
  ts       INTEGER NOT NULL,
  detail   TEXT NOT NULL DEFAULT '{}'
);
-- Newest first, optionally of one actor or one action (GET /v1/audit).
CREATE INDEX audit_ts ON audit(ts, audit_id);
CREATE INDEX audit_actor ON audit(actor, ts, audit_id);
CREATE INDEX audit_action ON audit(action, ts, audit_id);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END;
