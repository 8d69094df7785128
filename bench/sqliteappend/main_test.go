package main

import (
	"database/sql"
	"path/filepath"
	"testing"
)

// The schema read from the store's migration creates the events table and
// its indexes, in both key variants.
func TestEventsSchema(t *testing.T) {
	schema, err := eventsSchema(migration)
	if err != nil {
		t.Fatal(err)
	}
	for _, intKey := range []bool{false, true} {
		s := schema
		if intKey {
			s = withIntKey(s)
		}
		db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "events.db"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("intKey %v: %v\n%s", intKey, err, s)
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE tbl_name = 'events' AND type = 'index' AND sql IS NOT NULL`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("intKey %v: %d declared indexes on events (want events_run, events_llm_done), err %v", intKey, n, err)
		}
		db.Close()
	}
}
