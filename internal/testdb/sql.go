package testdb

import (
	"context"
	"database/sql"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
)

// rawSQL is what the store implementations expose for tests.
type rawSQL interface{ SQL() *sql.DB }

func pool(t testing.TB, s store.Store) *sql.DB {
	t.Helper()
	r, ok := s.(rawSQL)
	if !ok {
		t.Fatalf("store %T has no SQL pool", s)
	}
	return r.SQL()
}

// Exec runs a statement (no placeholders: they differ by dialect) and
// returns its error, for tests that check what the database refuses.
func Exec(t testing.TB, s store.Store, query string) error {
	t.Helper()
	_, err := pool(t, s).ExecContext(context.Background(), query)
	return err
}

// Count runs a SELECT COUNT(*)-like query (no placeholders) and returns
// the number.
func Count(t testing.TB, s store.Store, query string) int64 {
	t.Helper()
	var n int64
	if err := pool(t, s).QueryRowContext(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
