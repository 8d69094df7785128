// Command sqliteappend measures the event log's append on SQLite outside
// the server, to weigh changes below the store before making them
// (issue 13: the event log's writer spends most of its time inside SQLite):
//
//   - modernc: what agentplane ships — modernc.org/sqlite (SQLite
//     translated to Go) and the events table, keyed for reading by
//     UNIQUE (session_id, seq);
//   - c: the same through mattn/go-sqlite3, the C library through cgo;
//   - intkey: modernc, with that key on an integer standing for the session
//     instead of its text id (a mapping not built in the server);
//   - nokey: modernc without that key at all — not a design (a session's
//     events could then only be found by scanning), the ceiling of what
//     any change to the key could save;
//   - tail: modernc, the stream's deltas appended to an unindexed table
//     (rowid order only) and moved into events, sorted by session, once
//     its sessions have ~10 each on average: the key's cost deferred and
//     shared by a session's events, paid as a move that holds the one
//     writer for its length (reported: the longest);
//   - page1k: modernc with 1 KiB pages instead of 4 KiB (a commit's WAL
//     frames are pages: smaller ones, fewer bytes per touched leaf).
//
// Each runs the append in the store's shape — the events table as the
// store's migrations leave it (read from them), WAL, synchronous=FULL, a 64
// MiB page cache, a commit of N events spread over S sessions, 16 rows per
// statement — after a prefill gives every session a history (a session's
// index entries then fill leaf pages of their own, as in a long-running
// server), alternating the variants' order by round, and reports wall
// time and the process's user and system CPU per event. Checkpoints run
// inline, SQLite's default (the server runs them on a connection of its
// own): the same work for every variant.
//
// With -pwrites N it times N write calls of a WAL frame's two parts
// instead (pwrite.go): what fewer, larger writes could save.
//
// It is a module of its own so that the product does not depend on cgo:
//
//	cd bench/sqliteappend && go run . -rounds 3
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

// migration is where the events table's schema is read from: the one the
// store's migrations leave (0045 rebuilt the table), so that the bench
// follows it.
const migration = "../../internal/store/sqlite/migrations/0045_events_id_unindexed.sql"

// textKey is the table's reading key in that migration.
const textKey = "UNIQUE (session_id, seq)"

// withoutKey is schema without its reading key (the nokey variant).
func withoutKey(schema string) string {
	return strings.Replace(schema, ",\n  "+textKey, "", 1)
}

// tailTable is the tail variant's unindexed table, the events table's
// columns and nothing else.
const tailTable = `CREATE TABLE events_tail (event_id TEXT NOT NULL, session_id TEXT NOT NULL, seq INTEGER NOT NULL,
  run_id TEXT NOT NULL DEFAULT '', parent_run_id TEXT NOT NULL DEFAULT '', ts INTEGER NOT NULL, type TEXT NOT NULL, payload TEXT NOT NULL)`

// moveTail moves the whole tail into events, a session's rows together.
var moveTail = []string{
	`INSERT INTO events SELECT event_id, session_id, seq, run_id, parent_run_id, ts, type, payload FROM events_tail ORDER BY session_id, seq`,
	`DELETE FROM events_tail`,
}

// withIntKey is schema with its reading key on an integer standing for
// the session (the intkey variant).
func withIntKey(schema string) string {
	return strings.Replace(schema, textKey, "session_key INTEGER NOT NULL, UNIQUE (session_key, seq)", 1)
}

// eventsSchema reads the events table and its indexes from the migration
// at path: its CREATE TABLE events_new (renamed back to events) and its
// CREATE INDEX statements.
func eventsSchema(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the events schema (run from bench/sqliteappend, or set -migration): %w", err)
	}
	text := string(b)
	start := strings.Index(text, "CREATE TABLE events_new (")
	end := strings.Index(text[max(start, 0):], "\n);")
	if start < 0 || end < 0 || !strings.Contains(text, textKey) {
		return "", fmt.Errorf("%s: no CREATE TABLE events_new with %s", path, textKey)
	}
	schema := []string{strings.Replace(text[start:start+end+3], "events_new", "events", 1)}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "CREATE INDEX ") {
			schema = append(schema, line)
		}
	}
	return strings.Join(schema, "\n"), nil
}

// rowsPerStatement is the store's multi-row insert (sqlstore.exactChunk).
const rowsPerStatement = 16

// payload is a stream delta of typical size.
const payload = `{"text":"a delta of an agent's streamed answer, about this long","index":0}`

// shape is one workload: commits of batch events over sessions sessions,
// each of which had history events before.
type shape struct {
	name                     string
	batch, sessions, commits int
	history                  int
}

type variant struct {
	name, label string
	driver      string
	dsn         func(path string) string
	intKey      bool
	noKey       bool
	tail        bool
	// init runs before the schema.
	init string
}

// schema is the variant's: the store's events schema, changed as it says.
func (v variant) schema(events string) string {
	switch {
	case v.intKey:
		return withIntKey(events)
	case v.noKey:
		return withoutKey(events)
	case v.tail:
		return events + ";\n" + tailTable
	}
	return events
}

// table is where the variant's measured commits insert (its prefill goes
// to events).
func (v variant) table() string {
	if v.tail {
		return "events_tail"
	}
	return "events"
}

var (
	modernc = func(p string) string {
		return "file:" + p + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=cache_size(-65536)"
	}
	mattn = func(p string) string {
		return "file:" + p + "?_journal_mode=WAL&_synchronous=FULL&_cache_size=-65536"
	}
	variants = []variant{
		{name: "modernc", label: "modernc, text session key (shipped)", driver: "sqlite", dsn: modernc},
		{name: "c", label: "C SQLite (cgo), text session key", driver: "sqlite3", dsn: mattn},
		{name: "intkey", label: "modernc, integer session key", driver: "sqlite", dsn: modernc, intKey: true},
		{name: "nokey", label: "modernc, no session key (the ceiling)", driver: "sqlite", dsn: modernc, noKey: true},
		{name: "tail", label: "modernc, deltas to an unindexed tail, moved ~10 per session", driver: "sqlite", dsn: modernc, tail: true},
		// The driver runs journal_mode first whatever the DSN's order, and
		// a WAL file's page size is fixed: WAL once the size is set.
		{name: "page1k", label: "modernc, 1 KiB pages", driver: "sqlite", dsn: func(p string) string {
			return "file:" + p + "?_pragma=page_size(1024)&_pragma=synchronous(FULL)&_pragma=cache_size(-65536)"
		}, init: "PRAGMA journal_mode=WAL"},
	}
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each runs every shape through every variant, rotating which goes first")
	dir := flag.String("dir", os.TempDir(), "where the database files go (the disk under test)")
	only := flag.String("variants", "modernc,c,intkey,nokey,tail,page1k", "variants to run: modernc, c, intkey, nokey, tail, page1k")
	from := flag.String("migration", migration, "the migration whose events table is measured")
	calls := flag.Int("pwrites", 0, "instead: time this many WAL-frame-sized write calls under -dir (pwrite.go)")
	flag.Parse()
	if *calls > 0 {
		if err := pwrites(*dir, *calls); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	schema, err := eventsSchema(*from)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var chosen []variant
	for _, name := range strings.Split(*only, ",") {
		found := false
		for _, v := range variants {
			if v.name == strings.TrimSpace(name) {
				chosen, found = append(chosen, v), true
			}
		}
		if !found {
			fmt.Fprintf(os.Stderr, "unknown variant %q\n", name)
			os.Exit(2)
		}
	}
	shapes := []shape{
		// 200 streams × 20 deltas/s: ~12 events per commit (BENCHMARKS.md).
		{"200 streams (12 events/commit, 200 sessions)", 12, 200, 3000, 500},
		// 1,000 streams once the writer is behind: hundreds per commit.
		{"1,000 streams (500 events/commit, 1,000 sessions)", 500, 1000, 200, 500},
		// A tool call's commit: a few events of one session.
		{"tool call (3 events/commit, 1 session)", 3, 1, 3000, 500},
	}
	fmt.Printf("# the event log's append on SQLite — %s, %s\n\n", time.Now().UTC().Format(time.RFC3339), *dir)
	type key struct{ shape, variant int }
	sum := map[key]*result{}
	for r := 0; r < *rounds; r++ {
		for si, s := range shapes {
			for k := range chosen {
				vi := (k + r) % len(chosen) // rotate the order
				res, err := measure(*dir, schema, chosen[vi], s)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				fmt.Printf("round %d, %s, %s: %s\n", r+1, s.name, chosen[vi].label, res)
				if sum[key{si, vi}] == nil {
					sum[key{si, vi}] = &result{}
				}
				sum[key{si, vi}].add(res)
			}
		}
	}
	fmt.Printf("\n| workload | variant | wall µs/event | user CPU µs/event | system CPU µs/event | longest move (tail) |\n|---|---|---|---|---|---|\n")
	for si, s := range shapes {
		for vi, v := range chosen {
			t := sum[key{si, vi}]
			move := "—"
			if v.tail {
				move = fmt.Sprintf("%.1f ms", millis(t.longestMove))
			}
			fmt.Printf("| %s | %s | %.1f | %.1f | %.1f | %s |\n", s.name, v.label, t.per(t.wall), t.per(t.user), t.per(t.sys), move)
		}
	}
}

type result struct {
	events          int
	wall, user, sys time.Duration
	// longestMove is the tail variant's longest move: how long the
	// writer was held by one.
	longestMove time.Duration
}

func (r *result) add(o result) {
	r.events += o.events
	r.wall += o.wall
	r.user += o.user
	r.sys += o.sys
	r.longestMove = max(r.longestMove, o.longestMove)
}

func (r *result) per(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e3 / float64(r.events)
}

func (r result) String() string {
	s := fmt.Sprintf("%d events, wall %.1f, user %.1f, sys %.1f µs/event", r.events, r.per(r.wall), r.per(r.user), r.per(r.sys))
	if r.longestMove > 0 {
		s += fmt.Sprintf(", longest move %.1f ms", millis(r.longestMove))
	}
	return s
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// appender writes events in the store's shape.
type appender struct {
	db       *sql.DB
	v        variant
	sessions []string
	seq      []int64
	commits  int
	// table is where the measured commits insert: events, or the tail.
	table string
}

// measure prefills a new database with s.history events per session, then
// times s.commits commits of s.batch events.
func measure(dir, schema string, v variant, s shape) (result, error) {
	path := filepath.Join(dir, fmt.Sprintf("sqliteappend-%d.db", os.Getpid()))
	defer removeDB(path)
	removeDB(path)
	db, err := sql.Open(v.driver, v.dsn(path))
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the store's one writer connection
	if v.init != "" {
		if _, err := db.Exec(v.init); err != nil {
			return result{}, fmt.Errorf("%s: %w", v.name, err)
		}
	}
	if _, err := db.Exec(v.schema(schema)); err != nil {
		return result{}, fmt.Errorf("%s: schema: %w", v.name, err)
	}
	a := &appender{db: db, v: v, sessions: make([]string, s.sessions), seq: make([]int64, s.sessions), table: "events"}
	for i := range a.sessions {
		a.sessions[i] = fmt.Sprintf("ses_%026d", i*7919) // an id's length
	}
	// The history: every session's events, interleaved as streams are.
	for n := s.history * s.sessions; n > 0; n -= 5000 {
		if err := a.commit(min(n, 5000)); err != nil {
			return result{}, err
		}
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return result{}, err
	}
	var res result
	moveEvery := max(1, 10*s.sessions/s.batch) // commits between moves: ~10 events per session
	a.table = v.table()
	start := time.Now()
	u0, s0 := cpu()
	for c := 0; c < s.commits; c++ {
		if err := a.commit(s.batch); err != nil {
			return result{}, err
		}
		if v.tail && ((c+1)%moveEvery == 0 || c == s.commits-1) {
			began := time.Now()
			if err := a.move(); err != nil {
				return result{}, err
			}
			res.longestMove = max(res.longestMove, time.Since(began))
		}
	}
	res.wall = time.Since(start)
	u1, s1 := cpu()
	res.events, res.user, res.sys = s.commits*s.batch, u1-u0, s1-s0
	return res, nil
}

// move moves the tail into events in one transaction.
func (a *appender) move() error {
	tx, err := a.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, stmt := range moveTail {
		if _, err := tx.Exec(stmt); err != nil {
			return fmt.Errorf("move the tail: %w", err)
		}
	}
	return tx.Commit()
}

// commit appends n events, each to a random session, in one transaction.
func (a *appender) commit(n int) error {
	tx, err := a.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	cols := 8
	if a.v.intKey {
		cols = 9
	}
	args := make([]any, 0, rowsPerStatement*cols)
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		_, err := tx.Exec(insertText(a.table, len(args)/cols, a.v.intKey), args...)
		args = args[:0]
		return err
	}
	for i := 0; i < n; i++ {
		si := rand.IntN(len(a.sessions))
		a.seq[si]++
		args = append(args, fmt.Sprintf("evt_%08d_%04d", a.commits, i), a.sessions[si], a.seq[si], "run_"+a.sessions[si][4:], "", time.Now().UnixNano(), "agent_stream_delta", payload)
		if a.v.intKey {
			args = append(args, si+1)
		}
		if len(args) == cap(args) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	a.commits++
	return tx.Commit()
}

func insertText(table string, rows int, intKey bool) string {
	cols, row := "event_id, session_id, seq, run_id, parent_run_id, ts, type, payload", "(?,?,?,?,?,?,?,?),"
	if intKey {
		cols, row = cols+", session_key", "(?,?,?,?,?,?,?,?,?),"
	}
	return "INSERT INTO " + table + " (" + cols + ") VALUES " + strings.TrimSuffix(strings.Repeat(row, rows), ",")
}

// cpu is the process's user and system CPU time so far.
func cpu() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
}
