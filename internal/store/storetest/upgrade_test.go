package storetest

import (
	"context"
	"database/sql"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

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
