package storetest

import (
	"context"
	"database/sql"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/migrate"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/store/sqlite"
)

// databaseBefore makes dsn's database with every migration before
// migration (e.g. "0040_input_required") applied, and returns a plain
// connection to it, for a test to fill before the store upgrades it.
func databaseBefore(t *testing.T, ctx context.Context, dialect, dsn, migration string) *sql.DB {
	t.Helper()
	var all fs.FS
	if strings.HasPrefix(dsn, "sqlite:") {
		all = sqlite.Migrations()
	} else {
		all = postgres.Migrations()
	}
	db := rawDB(t, dsn)
	old := fstest.MapFS{}
	names, _ := fs.Glob(all, "migrations/*.sql")
	for _, n := range names {
		if strings.Compare(n, "migrations/"+migration+".sql") < 0 {
			b, _ := fs.ReadFile(all, n)
			old[n] = &fstest.MapFile{Data: b}
		}
	}
	if len(old) == 0 || len(old) == len(names) {
		t.Fatalf("found %d of %d migrations before %s", len(old), len(names), migration)
	}
	if err := migrate.Apply(ctx, db, old, "migrations", dialect == "postgres"); err != nil {
		t.Fatal(err)
	}
	return db
}

// openUpgraded opens dsn as the platform does, which applies the rest of
// the migrations; closed at test end.
func openUpgraded(t *testing.T, ctx context.Context, dsn string) store.Store {
	t.Helper()
	var s store.Store
	var err error
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		s, err = sqlite.Open(ctx, path)
	} else {
		s, err = postgres.Open(ctx, dsn, postgres.Options{})
	}
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
