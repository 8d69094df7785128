package main

import (
	"database/sql"
	"path/filepath"
	"testing"
)

// The schema read from the store's migration creates the events table and
// its indexes in every variant's form, with or without the reading key as
// the variant says; the tail variant's move carries its rows into events.
func TestEventsSchema(t *testing.T) {
	schema, err := eventsSchema(migration)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range variants {
		if v.driver != "sqlite" {
			continue // the cgo driver is run, not tested here
		}
		t.Run(v.name, func(t *testing.T) {
			db, err := sql.Open(v.driver, v.dsn(filepath.Join(t.TempDir(), "events.db")))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			if v.init != "" {
				if _, err := db.Exec(v.init); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.Exec(v.schema(schema)); err != nil {
				t.Fatalf("%v\n%s", err, v.schema(schema))
			}
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE tbl_name = 'events' AND type = 'index' AND sql IS NOT NULL`).Scan(&n); err != nil || n != 2 {
				t.Fatalf("%d declared indexes on events (want events_run, events_llm_done), err %v", n, err)
			}
			var keys int // the automatic index of UNIQUE (…, seq)
			if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE tbl_name = 'events' AND type = 'index' AND sql IS NULL`).Scan(&keys); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 0, false: 1}[v.noKey]; keys != want {
				t.Fatalf("%d reading keys on events, want %d", keys, want)
			}
			var size int
			var mode string
			if err := db.QueryRow(`SELECT page_size, journal_mode FROM pragma_page_size, pragma_journal_mode`).Scan(&size, &mode); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1024, false: 4096}[v.name == "page1k"]; size != want || mode != "wal" {
				t.Fatalf("page size %d, journal mode %s; want %d, wal", size, mode, want)
			}
			a := &appender{db: db, v: v, sessions: []string{"ses_a", "ses_b"}, seq: make([]int64, 2), table: v.table()}
			if err := a.commit(10); err != nil {
				t.Fatal(err)
			}
			if v.tail {
				if err := a.move(); err != nil {
					t.Fatal(err)
				}
				if n := count(t, db, "events_tail"); n != 0 {
					t.Fatalf("%d rows left in the tail after the move", n)
				}
			}
			if n := count(t, db, "events"); n != 10 {
				t.Fatalf("%d events, want 10", n)
			}
		})
	}
}

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
