// Package postgres opens the PostgreSQL store through pgx v5 (database/sql
// adapter), the choice for multi-replica deployments.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/migrate"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

var dialect = &sqlstore.Dialect{
	Name:                   "postgres",
	Numbered:               true,
	IsUniqueViolation:      hasCode("23505"),
	RunsActiveStatement:    `SELECT agentplane_runs_active(?)`,
	RunEndQuietStatement:   `SELECT agentplane_run_end_quiet(?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	SessionAsSeenStatement: `SELECT agentplane_session_as_seen(?, ?, ?, ?, ?, ?)`,
	FailedCheck:            failedCheck,
	IsNotNullViolation:     hasCode("23502"),
	IsUnavailable:          isUnavailable,
	// text refuses NUL bytes and invalid UTF-8 (issue 8).
	EscapeText: true,
	Pipeline:   pipeline,
}

// hasCode reports an error of the server with SQLSTATE code.
func hasCode(code string) func(error) bool {
	return func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == code
	}
}

// checkFailures are the SQLSTATEs the check functions raise: migrations
// 0047 (agentplane_runs_active), 0048 (agentplane_run_end_quiet) and 0049
// (agentplane_session_as_seen).
var checkFailures = map[string]error{
	"AP001": store.ErrRunEnded,
	"AP002": store.ErrRunNotQuiet,
	"AP003": store.ErrSessionMoved,
}

// failedCheck is the store error of a check function's failure, or nil.
func failedCheck(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil
	}
	return checkFailures[pe.Code]
}

// isUnavailable: the server could not be reached, dropped the connection,
// or refuses work for now — not a problem with the statement.
func isUnavailable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"): // connection_exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // admin/crash shutdown, cannot connect now
			return true
		case pe.Code == "53300": // too_many_connections
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// Pool defaults. A PostgreSQL server allows 100 connections by default; at
// 32 per process three replicas (plus their listeners) exhausted it
// (issue 8, item 11).
const (
	DefaultMaxConns    = 10
	DefaultMaxIdleTime = time.Minute
)

// Options size the connection pool. Zero values pick the defaults.
type Options struct {
	// MaxConns bounds the open connections of this process (idle ones
	// included). The event notification listener holds one more.
	MaxConns int
	// MaxIdleTime closes a connection unused this long, so a process
	// that was busy once does not keep its peak forever.
	MaxIdleTime time.Duration
}

// Open connects to url (postgres://…) and migrates the schema.
func Open(ctx context.Context, url string, opts Options) (*sqlstore.DB, error) {
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxIdleTime <= 0 {
		opts.MaxIdleTime = DefaultMaxIdleTime
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	db.SetMaxOpenConns(opts.MaxConns)
	db.SetMaxIdleConns(opts.MaxConns)
	db.SetConnMaxIdleTime(opts.MaxIdleTime)
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
