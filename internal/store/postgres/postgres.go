// Package postgres opens the PostgreSQL store through pgx v5 (database/sql
// adapter), the choice for multi-replica deployments.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/agentplane/agentplane/internal/store/migrate"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

var dialect = &sqlstore.Dialect{
	Name:     "postgres",
	Numbered: true,
	IsUniqueViolation: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23505"
	},
	BeginTx: func(ctx context.Context, db *sql.DB) (*sql.Tx, error) {
		return db.BeginTx(ctx, nil)
	},
}

// Open connects to url (postgres://…) and migrates the schema.
func Open(ctx context.Context, url string) (*sqlstore.DB, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := migrate.Apply(ctx, db, migrations, "migrations", true); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	return sqlstore.New(dialect, db, db), nil
}

// Migrations is the embedded migrations directory ("migrations/*.sql"),
// for tests that build a database at an older version.
func Migrations() fs.FS { return migrations }
