// Package testdb gives tests a fresh database of each dialect: a new SQLite
// file, or a new PostgreSQL schema on AGENTPLANE_TEST_POSTGRES dropped at the
// end. Outside CI a missing PostgreSQL skips with a clear message; with
// CI=true it fails, because skipping there would hide a broken store.
package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver for schema set-up

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/store/sqlite"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

// DefaultPostgres is used when AGENTPLANE_TEST_POSTGRES is unset.
const DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Dialects are the names Each runs a test under.
var Dialects = []string{"sqlite", "postgres"}

// Each runs fn as a subtest once per dialect.
func Each(t *testing.T, fn func(t *testing.T, dialect string)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(d, func(t *testing.T) { fn(t, d) })
	}
}

// DSN returns a fresh database for dialect in the AGENTPLANE_DB form
// ("sqlite:PATH" or a postgres URL with its own search_path).
func DSN(t testing.TB, dialect string) string {
	t.Helper()
	switch dialect {
	case "sqlite":
		return "sqlite:" + filepath.Join(t.TempDir(), "agentplane.db")
	case "postgres":
		return postgresSchema(t)
	}
	t.Fatalf("unknown dialect %q", dialect)
	return ""
}

// Open returns a fresh, migrated store of dialect, closed at test end.
func Open(t testing.TB, dialect string) store.Store {
	t.Helper()
	return OpenDSN(t, DSN(t, dialect))
}

// OpenDSN opens the database at dsn (DSN's form) as the platform does,
// migrating it, closed at test end: a second process on a database, or one
// a test made at an older version.
func OpenDSN(t testing.TB, dsn string) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s store.Store
	var err error
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		var db *sqlstore.DB
		if db, err = sqlite.Open(ctx, path); err == nil {
			if auditing() {
				db.ObserveQueries(observe)
			}
			s = db
		}
	} else {
		s, err = postgres.Open(ctx, dsn, postgres.Options{})
	}
	if err != nil {
		t.Fatalf("open store %s: %v", dsn, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// PostgresURL is the server the tests use.
func PostgresURL() string {
	if u := os.Getenv("AGENTPLANE_TEST_POSTGRES"); u != "" {
		return u
	}
	return DefaultPostgres
}

var (
	pgOnce sync.Once
	pgErr  error
)

func postgresSchema(t testing.TB) string {
	t.Helper()
	base := PostgresURL()
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		db, err := sql.Open("pgx", base)
		if err == nil {
			err = db.PingContext(ctx)
			db.Close()
		}
		pgErr = err
	})
	if pgErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL at %s is required in CI: %v", base, pgErr)
		}
		t.Skipf("PostgreSQL at %s not reachable (set AGENTPLANE_TEST_POSTGRES): %v", base, pgErr)
	}
	schema := strings.ReplaceAll(ids.New("t"), "_", "")
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer db.Close()
		db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", base, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return fmt.Sprint(u)
}
