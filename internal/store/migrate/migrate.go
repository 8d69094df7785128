// Package migrate applies the embedded, numbered SQL migrations of a dialect
// in order, each once, recording them in schema_migrations.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// Apply runs every *.sql file in dir of fsys not yet recorded. With
// advisoryLock (PostgreSQL) concurrent starters take turns, so two replicas
// booting together do not both migrate.
func Apply(ctx context.Context, db *sql.DB, fsys fs.FS, dir string, advisoryLock bool) error {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	if advisoryLock {
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(727274)`); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(727274)`)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, name := range names {
		version := strings.TrimSuffix(name[strings.LastIndex(name, "/")+1:], ".sql")
		var n int
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = '`+version+`'`).Scan(&n); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if n > 0 {
			continue
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", version, err)
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %s: %w", version, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES ('`+version+`')`); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %s: %w", version, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate %s: %w", version, err)
		}
	}
	return nil
}
