// Package sqlite opens the embedded default store: a SQLite file in WAL mode
// through the pure-Go modernc driver, one writer connection and a small pool
// of readers.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentplane/agentplane/internal/store/migrate"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// dialect is what every SQLite store shares; Open completes a copy of it
// with the Pipeline of its writer connection.
var dialect = &sqlstore.Dialect{
	Name: "sqlite",
	IsUniqueViolation: func(err error) bool {
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return false
		}
		c := se.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	},
	// Busy or locked past busy_timeout: another process holds the file
	// (one writer at a time); retrying later can succeed.
	IsUnavailable: func(err error) bool {
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return false
		}
		c := se.Code() & 0xff // the primary code of an extended one
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	},
	// modernc parses and plans an unprepared statement on every call.
	PrepareStatements: true,
}

// Open opens (creating if needed) the database file at path and migrates it.
func Open(ctx context.Context, path string) (*sqlstore.DB, error) {
	db, _, err := open(ctx, path)
	return db, err
}

// open is Open, with the store's transactions (tests).
func open(ctx context.Context, path string) (*sqlstore.DB, *direct, error) {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, fmt.Errorf("sqlite: create directory: %w", err)
		}
	}
	// synchronous(FULL): a commit is on disk before its events are delivered
	// (DESIGN §2.1); group commit in the event log keeps that cheap.
	// temp_store(MEMORY): statement journals of the batch's multi-row
	// statements stay in memory instead of spilling to a temp file page by
	// page (16 % of the server's CPU under the foundation benchmark).
	pragmas := []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(10000)", "foreign_keys(ON)", "temp_store(MEMORY)"}
	dsn := sqliteDSN(path, pragmas)
	// The writer does not checkpoint by itself (wal_autocheckpoint(0)): a
	// whole checkpoint inside a commit stalls the event log (60-900 ms
	// seen). A background PASSIVE checkpoint on a reader connection copies
	// the WAL instead, and the writer only finishes what it left
	// (checkpoint.go), so that the WAL starts over rather than grow.
	// journal_size_limit(64 MiB): a WAL that a burst grew is cut back to
	// that when it starts over.
	// cache_size(-65536): the writer's page cache is 64 MiB instead of
	// SQLite's 2 MiB. A batch of events touches one leaf page per session in
	// each per-session and per-run index; with 1,000 streaming sessions that
	// working set outgrows 2 MiB, and each commit re-read those pages with
	// pread and spilled dirty ones to the WAL mid-transaction (issue 13: the
	// append rate fell with the number of sessions; at 1,000 streams 40 % of
	// the server's CPU was pread/pwrite). The cache grows only as pages are
	// used.
	write, err := sql.Open("sqlite", sqliteDSN(path, append(pragmas, "wal_autocheckpoint(0)", "journal_size_limit(67108864)", "cache_size(-65536)")))
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// SQLite has one writer; a single connection turns lock contention into
	// queueing in database/sql instead of SQLITE_BUSY errors.
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	if err := migrate.Apply(ctx, write, migrations, "migrations", false); err != nil {
		write.Close()
		return nil, nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	read, err := sql.Open("sqlite", dsn)
	if err != nil {
		write.Close()
		return nil, nil, fmt.Errorf("sqlite: open readers %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0)*2)
	read.SetMaxOpenConns(n)
	read.SetMaxIdleConns(n)
	// Each store its own copy of the dialect: its transactions' prepared
	// statements belong to its writer connection.
	d, dt := *dialect, &direct{}
	d.Pipeline, d.PipelineInProcess = dt.pipeline, true
	db := sqlstore.New(&d, write, read)
	// Stopped first: its last pass runs on the writer's connection.
	db.OnClose((&checkpointer{read: read, write: write}).start())
	db.OnClose(func() { dt.close(write) })
	return db, dt, nil
}

func sqliteDSN(path string, pragmas []string) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	// A transaction begun through database/sql (migrations) takes the
	// write lock at once, as the store's own do (pipe.go): writers queue
	// on the lock instead of failing with SQLITE_BUSY later.
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// Migrations is the embedded migrations directory ("migrations/*.sql"),
// for tests that build a database at an older version.
func Migrations() fs.FS { return migrations }
