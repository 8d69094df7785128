// Command sqlitedriver asks whether agentplane's SQLite store would gain from
// a cgo SQLite driver (mattn/go-sqlite3, the C library) in place of the
// pure-Go modernc.org/sqlite it ships with (issue 13: the event log's
// writer spends most of its time inside SQLite).
//
// It runs the event log's append in its own shape — the events table of
// migration 0045 with its (session_id, seq) index, WAL, synchronous=FULL, a
// 64 MiB page cache, a commit of N events spread over S sessions, inserted
// 16 rows per statement — through each driver in turn, alternating rounds,
// and reports wall time and the process's user and system CPU per event.
// Checkpoints run inline, SQLite's default (the server runs them on a
// connection of its own): the same work for both drivers.
//
// It is a module of its own so that the product does not depend on cgo:
//
//	cd bench/sqlitedriver && go run . -rounds 3
package main

import (
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	_ "github.com/mattn/go-sqlite3" // driver "sqlite3": the C library through cgo
	_ "modernc.org/sqlite"          // driver "sqlite": what agentplane ships
)

// schema is the events table as migration 0045 leaves it
// (internal/store/sqlite/migrations/0045_events_id_unindexed.sql).
const schema = `CREATE TABLE events (
  event_id      TEXT NOT NULL,
  session_id    TEXT NOT NULL,
  seq           INTEGER NOT NULL,
  run_id        TEXT NOT NULL DEFAULT '',
  parent_run_id TEXT NOT NULL DEFAULT '',
  ts            INTEGER NOT NULL,
  type          TEXT NOT NULL,
  payload       TEXT NOT NULL,
  UNIQUE (session_id, seq)
);
CREATE INDEX events_run ON events(run_id, seq) WHERE type NOT IN ('agent_stream_delta', 'sub_agent_partial');
CREATE INDEX events_llm_done ON events(ts) WHERE type = 'llm_call_done';`

// rowsPerStatement is the store's multi-row insert (sqlstore.exactChunk).
const rowsPerStatement = 16

// payload is a stream delta of typical size.
const payload = `{"text":"a delta of an agent's streamed answer, about this long","index":0}`

// shape is one workload: commits of batch events over sessions sessions.
type shape struct {
	name            string
	batch, sessions int
	commits         int
}

// drivers, by database/sql name, with the DSN that sets the store's pragmas
// (internal/store/sqlite/sqlite.go) in each driver's syntax.
var drivers = []struct {
	name, label string
	dsn         func(path string) string
}{
	{"sqlite", "modernc (pure Go, shipped)", func(p string) string {
		return "file:" + p + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=cache_size(-65536)"
	}},
	{"sqlite3", "mattn (C through cgo)", func(p string) string {
		return "file:" + p + "?_journal_mode=WAL&_synchronous=FULL&_cache_size=-65536"
	}},
}

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each runs every shape through every driver, alternating which goes first")
	dir := flag.String("dir", os.TempDir(), "where the database files go (the disk under test)")
	flag.Parse()
	shapes := []shape{
		// 200 streams × 20 deltas/s: ~12 events per commit (BENCHMARKS.md).
		{"200 streams (12 events/commit, 200 sessions)", 12, 200, 3000},
		// 1,000 streams once the writer is behind: hundreds per commit.
		{"1,000 streams (500 events/commit, 1,000 sessions)", 500, 1000, 150},
		// A tool call's commit: a few events of one session.
		{"tool call (3 events/commit, 1 session)", 3, 1, 3000},
	}
	fmt.Printf("# SQLite drivers on the event log's append — %s, %s\n\n", time.Now().UTC().Format(time.RFC3339), *dir)
	type key struct{ shape, driver int }
	sum := map[key]*result{}
	for r := 0; r < *rounds; r++ {
		for si, s := range shapes {
			for k := range drivers {
				di := (k + r) % len(drivers) // alternate the order
				res, err := measure(*dir, drivers[di].name, drivers[di].dsn, s)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				fmt.Printf("round %d, %s, %s: %s\n", r+1, s.name, drivers[di].label, res)
				if sum[key{si, di}] == nil {
					sum[key{si, di}] = &result{}
				}
				sum[key{si, di}].add(res)
			}
		}
	}
	fmt.Printf("\n| workload | driver | wall µs/event | user CPU µs/event | system CPU µs/event |\n|---|---|---|---|---|\n")
	for si, s := range shapes {
		for di, d := range drivers {
			t := sum[key{si, di}]
			fmt.Printf("| %s | %s | %.1f | %.1f | %.1f |\n", s.name, d.label, t.per(t.wall), t.per(t.user), t.per(t.sys))
		}
	}
}

type result struct {
	events          int
	wall, user, sys time.Duration
}

func (r *result) add(o result) {
	r.events += o.events
	r.wall += o.wall
	r.user += o.user
	r.sys += o.sys
}

func (r *result) per(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e3 / float64(r.events)
}

func (r result) String() string {
	return fmt.Sprintf("%d events, wall %.1f, user %.1f, sys %.1f µs/event", r.events, r.per(r.wall), r.per(r.user), r.per(r.sys))
}

// measure appends s.commits commits of s.batch events to a new database
// through driver; the first tenth warms up (the page cache, the WAL's
// first pages) and is not counted.
func measure(dir, driver string, dsn func(string) string, s shape) (result, error) {
	path := filepath.Join(dir, fmt.Sprintf("sqlitedriver-%d.db", os.Getpid()))
	defer removeDB(path)
	removeDB(path)
	db, err := sql.Open(driver, dsn(path))
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the store's one writer connection
	if _, err := db.Exec(schema); err != nil {
		return result{}, fmt.Errorf("%s: schema: %w", driver, err)
	}
	sessions := make([]string, s.sessions)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("ses_%026d", i*7919) // an id's length
	}
	seq := make([]int64, s.sessions)
	full := insertText(rowsPerStatement)
	warm := s.commits / 10
	var res result
	var start time.Time
	var u0, s0 time.Duration
	for c := 0; c < s.commits; c++ {
		if c == warm {
			start, u0, s0 = time.Now(), cpu(syscall.RUSAGE_SELF, true), cpu(syscall.RUSAGE_SELF, false)
		}
		tx, err := db.Begin()
		if err != nil {
			return result{}, err
		}
		args := make([]any, 0, rowsPerStatement*8)
		flush := func() error {
			if len(args) == 0 {
				return nil
			}
			text := full
			if len(args) < cap(args) {
				text = insertText(len(args) / 8)
			}
			_, err := tx.Exec(text, args...)
			args = args[:0]
			return err
		}
		for i := 0; i < s.batch; i++ {
			si := rand.IntN(s.sessions)
			seq[si]++
			args = append(args, fmt.Sprintf("evt_%08d_%04d", c, i), sessions[si], seq[si], "run_"+sessions[si][4:], "", time.Now().UnixNano(), "agent_stream_delta", payload)
			if len(args) == cap(args) {
				if err := flush(); err != nil {
					tx.Rollback()
					return result{}, err
				}
			}
		}
		if err := flush(); err != nil {
			tx.Rollback()
			return result{}, err
		}
		if err := tx.Commit(); err != nil {
			return result{}, err
		}
		if c >= warm {
			res.events += s.batch
		}
	}
	res.wall = time.Since(start)
	res.user = cpu(syscall.RUSAGE_SELF, true) - u0
	res.sys = cpu(syscall.RUSAGE_SELF, false) - s0
	return res, nil
}

func insertText(rows int) string {
	return "INSERT INTO events (event_id, session_id, seq, run_id, parent_run_id, ts, type, payload) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?,?,?),", rows), ",")
}

// cpu is the process's user (or system) CPU time so far.
func cpu(who int, user bool) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	tv := ru.Stime
	if user {
		tv = ru.Utime
	}
	return time.Duration(tv.Nano())
}

func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
}
