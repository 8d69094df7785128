package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/migrate"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/testdb"
)

// The migration to text columns keeps what a database created before it
// holds, and afterwards the values jsonb refused are stored.
func TestTextColumnsMigrationKeepsData(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := fstest.MapFS{}
	names, _ := fs.Glob(postgres.Migrations(), "migrations/*.sql")
	for _, n := range names {
		if n < "migrations/0004" {
			b, _ := fs.ReadFile(postgres.Migrations(), n)
			old[n] = &fstest.MapFile{Data: b}
		}
	}
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := migrate.Apply(ctx, raw, old, "migrations", true); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO sessions (session_id, user_id, created_at, last_seq, metadata) VALUES ('s1', 'u', 1, 1, '{"b":1,"a":2}')`,
		`INSERT INTO sessions (session_id, user_id, created_at) VALUES ('s2', 'u', 1)`,
		`INSERT INTO events (event_id, session_id, seq, ts, type, payload) VALUES ('e1', 's1', 1, 1, 't', '{"text":"hi"}')`,
		`INSERT INTO agents (agent_id, name, endpoint, key_hash, created_at, updated_at) VALUES ('a1', 'A', 'http://x', 'h', 1, 1)`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	st, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s1, err := st.SessionGet(ctx, "s1")
	if err != nil || string(s1.Metadata) != `{"a": 2, "b": 1}` { // jsonb's own rendering, as before
		t.Fatalf("session s1 after the migration: %+v, %v", s1, err)
	}
	if s2, err := st.SessionGet(ctx, "s2"); err != nil || string(s2.Metadata) != `{}` {
		t.Fatalf("session s2 (default metadata): %+v, %v", s2, err)
	}
	evs, err := st.EventsList(ctx, &store.EventsListParams{SessionID: "s1"})
	if err != nil || len(evs) != 1 || string(evs[0].Payload) != `{"text": "hi"}` {
		t.Fatalf("events after the migration: %+v, %v", evs, err)
	}
	if a, err := st.AgentGet(ctx, "a1"); err != nil || string(a.Capabilities) != `[]` || string(a.LinkedAgents) != `[]` {
		t.Fatalf("agent after the migration: %+v, %v", a, err)
	}
	if _, err := st.EventsAppend(ctx, []store.EventParams{{SessionID: "s1", TS: 2, Type: "state", Payload: []byte(`{"detail":"\u0000"}`)}}); err != nil {
		t.Fatalf("append after the migration: %v", err)
	}
}

// A database that cannot be reached is store.ErrUnavailable, for reads,
// transactions and pings alike, and the store works again once it can.
func TestUnreachableIsUnavailable(t *testing.T) {
	proxy, dsn := testdb.PostgresProxy(t, testdb.DSN(t, "postgres"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "s", UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	checks := map[string]func() error{
		"read": func() error { _, err := st.SessionGet(ctx, "s"); return err },
		"write": func() error {
			_, err := st.EventsAppend(ctx, []store.EventParams{{SessionID: "s", TS: 1, Type: "t"}})
			return err
		},
		"tx": func() error {
			return st.InTx(ctx, func(tx store.Queries) error { _, err := tx.SessionGet(ctx, "s"); return err })
		},
		"list": func() error { _, err := st.RunListActive(ctx, &store.RunListActiveParams{}); return err },
		"ping": func() error { return st.Ping(ctx) },
	}
	for name, fn := range checks {
		if err := fn(); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s with the database cut off: %v, want store.ErrUnavailable", name, err)
		}
	}
	proxy.Restore()
	if s, err := st.SessionGet(ctx, "s"); err != nil || s.UserID != "u" {
		t.Fatalf("after the database came back: %+v, %v", s, err)
	}
	if _, err := st.SessionGet(ctx, "nope"); !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a missing row: %v, want only ErrNotFound", err)
	}
	if !strings.Contains(dsn, "127.0.0.1") {
		t.Fatalf("dsn %s does not go through the proxy", dsn)
	}
}
