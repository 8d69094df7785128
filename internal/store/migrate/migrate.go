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

// foreignKeysOff marks a SQLite migration that rebuilds a table other tables
// reference: SQLite changes a constraint only by rebuilding, and the rebuild
// must run with foreign keys off (a pragma that is a no-op inside a
// transaction), then check them before committing
// (https://www.sqlite.org/lang_altertable.html#otheralter).
const foreignKeysOff = "-- agentplane:foreign-keys-off"

// editsSchema marks a SQLite migration that edits a table's stored
// definition (PRAGMA writable_schema) to loosen a CHECK without rebuilding
// the table. SQLite rereads a schema only when schema_version changes, and
// the new value must be computed, so the runner bumps it in the migration's
// transaction and checks the database's integrity before committing.
const editsSchema = "-- agentplane:edits-schema"

// Apply runs every *.sql file in dir of fsys not yet recorded. With
// advisoryLock (PostgreSQL) concurrent starters take turns, so two replicas
// booting together do not both migrate. A file whose first line is
// foreignKeysOff runs with SQLite's foreign keys off and checked at its end.
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
		if err := applyOne(ctx, conn, version, string(body)); err != nil {
			return err
		}
	}
	return nil
}

func applyOne(ctx context.Context, conn *sql.Conn, version, body string) (err error) {
	fkOff := strings.HasPrefix(body, foreignKeysOff)
	if fkOff {
		if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
			return fmt.Errorf("migrate %s: %w", version, err)
		}
		defer func() {
			if _, e := conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA foreign_keys = ON`); e != nil && err == nil {
				err = fmt.Errorf("migrate %s: foreign keys back on: %w", version, e)
			}
		}()
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", version, err)
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		tx.Rollback()
		return fmt.Errorf("migrate %s: %w", version, err)
	}
	if strings.HasPrefix(body, editsSchema) {
		if err := bumpSchemaVersion(ctx, tx); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %s: %w", version, err)
		}
	}
	if fkOff {
		rows, err := tx.QueryContext(ctx, `PRAGMA foreign_key_check`)
		if err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %s: foreign key check: %w", version, err)
		}
		broken := rows.Next()
		rows.Close()
		if broken {
			tx.Rollback()
			return fmt.Errorf("migrate %s: the rebuilt tables break a foreign key", version)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES ('`+version+`')`); err != nil {
		tx.Rollback()
		return fmt.Errorf("migrate %s: %w", version, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate %s: %w", version, err)
	}
	return nil
}

// bumpSchemaVersion makes every connection reread the schema a migration
// edited in place, then makes this one reread it: a definition that no
// longer parses fails here, before the commit ("malformed database schema"),
// not in the running server. (No integrity_check: it reads every page.)
func bumpSchemaVersion(ctx context.Context, tx *sql.Tx) error {
	var v int64
	if err := tx.QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&v); err != nil {
		return fmt.Errorf("read schema_version: %w", err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA schema_version = %d`, v+1)); err != nil {
		return fmt.Errorf("bump schema_version: %w", err)
	}
	var n int64
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil {
		return fmt.Errorf("reread the edited schema: %w", err)
	}
	return nil
}
