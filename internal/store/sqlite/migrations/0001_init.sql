CREATE TABLE sessions (
  session_id TEXT PRIMARY KEY,
  user_id    TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  last_seq   INTEGER NOT NULL DEFAULT 0,
  metadata   TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX sessions_user ON sessions(user_id, created_at);

CREATE TABLE runs (
  run_id        TEXT PRIMARY KEY,
  session_id    TEXT NOT NULL REFERENCES sessions(session_id),
  agent_id      TEXT NOT NULL,
  parent_run_id TEXT NOT NULL DEFAULT '',
  user_id       TEXT NOT NULL DEFAULT '',
  status        TEXT NOT NULL,
  owner         TEXT NOT NULL,
  started_at    INTEGER NOT NULL,
  ended_at      INTEGER,
  error         TEXT,
  usage         TEXT,
  CHECK (status IN ('RUNNING','PAUSED_WAITING_APPROVAL','PAUSED_WAITING_TOOL','DONE','FAILED','CANCELLED')),
  CHECK ((status IN ('DONE','FAILED','CANCELLED')) = (ended_at IS NOT NULL))
);
-- At most one active root run per session (seed 003 §7.1), enforced by the
-- database so two replicas cannot both start one.
CREATE UNIQUE INDEX runs_one_active_root ON runs(session_id) WHERE parent_run_id = '' AND ended_at IS NULL;
CREATE INDEX runs_active_owner ON runs(owner) WHERE ended_at IS NULL;
CREATE INDEX runs_session ON runs(session_id, started_at);

CREATE TABLE events (
  event_id      TEXT PRIMARY KEY,
  session_id    TEXT NOT NULL,
  seq           INTEGER NOT NULL,
  run_id        TEXT NOT NULL DEFAULT '',
  parent_run_id TEXT NOT NULL DEFAULT '',
  ts            INTEGER NOT NULL,
  type          TEXT NOT NULL,
  payload       TEXT NOT NULL,
  UNIQUE (session_id, seq)
);
CREATE INDEX events_run ON events(run_id, seq);

CREATE TABLE messages (
  message_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL,
  run_id     TEXT NOT NULL DEFAULT '',
  role       TEXT NOT NULL,
  content    TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX messages_session ON messages(session_id, message_id);

CREATE TABLE agents (
  agent_id          TEXT PRIMARY KEY,
  name              TEXT NOT NULL,
  endpoint          TEXT NOT NULL,
  capabilities      TEXT NOT NULL DEFAULT '[]',
  linked_agents     TEXT NOT NULL DEFAULT '[]',
  key_hash          TEXT NOT NULL UNIQUE,
  status            TEXT NOT NULL DEFAULT 'unknown',
  last_heartbeat_at INTEGER NOT NULL DEFAULT 0,
  last_probe_at     INTEGER NOT NULL DEFAULT 0,
  created_at        INTEGER NOT NULL,
  updated_at        INTEGER NOT NULL
);

CREATE TABLE context_blobs (
  owner_id   TEXT NOT NULL,
  key        TEXT NOT NULL,
  version    INTEGER NOT NULL,
  data       TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (owner_id, key, version)
);

CREATE TABLE instances (
  instance_id  TEXT PRIMARY KEY,
  heartbeat_at INTEGER NOT NULL
);
