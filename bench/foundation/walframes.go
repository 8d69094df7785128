package main

import (
	"context"
	"database/sql"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/sqlite"
)

// walframesMain replays the shape of a streaming commit on the real SQLite
// schema and counts the WAL frames (pages) each commit writes, by b-tree:
// what a delivery commit's I/O is made of (issue 13). It is a diagnostic,
// not the product's figure: one connection, no event log, no server.
func walframesMain(args []string) error {
	fs := flag.NewFlagSet("walframes", flag.ExitOnError)
	sessions := fs.Int("sessions", 200, "sessions (streams)")
	per := fs.Int("per-commit", 12, "events per commit, each in a different session")
	commits := fs.Int("commits", 1500, "measured commits")
	prefill := fs.Int("prefill", 500, "events per session written before measuring")
	seqFrom := fs.String("seq", "index", "where a commit gets the next seq: index (MAX(seq), what agentplane does on SQLite) or counter (UPDATE sessions.last_seq, what it did before)")
	noRowid := fs.Bool("without-rowid", false, "rebuild the events table WITHOUT ROWID, keyed (session_id, seq)")
	_ = fs.Parse(args)
	if *seqFrom != "index" && *seqFrom != "counter" {
		return fmt.Errorf("-seq is index or counter, not %q", *seqFrom)
	}
	if *per > *sessions {
		return fmt.Errorf("-per-commit %d is more than -sessions %d", *per, *sessions)
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "walframes")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "agentplane.db")

	// The schema is the product's: its migrations, through its store.
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	sids := make([]string, *sessions)
	runIDs := make([]string, *sessions)
	for i := range sids {
		sids[i], runIDs[i] = ids.New("ses"), ids.New("run")
		if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sids[i], UserID: "user-" + sids[i][len(sids[i])-6:], CreatedAt: time.Now().UnixMilli()}); err != nil {
			return err
		}
	}
	if err := st.Close(); err != nil {
		return err
	}

	// One connection of its own, checkpointing only when told.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=wal_autocheckpoint(0)&_pragma=cache_size(-65536)&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if *noRowid {
		if _, err := db.ExecContext(ctx, `CREATE TABLE events_wr (event_id TEXT NOT NULL, session_id TEXT NOT NULL, seq INTEGER NOT NULL,
			run_id TEXT NOT NULL DEFAULT '', parent_run_id TEXT NOT NULL DEFAULT '', ts INTEGER NOT NULL, type TEXT NOT NULL, payload TEXT NOT NULL,
			PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
			DROP TABLE events; ALTER TABLE events_wr RENAME TO events;
			CREATE INDEX events_run ON events(run_id, seq) WHERE type NOT IN ('agent_stream_delta', 'sub_agent_partial');
			CREATE INDEX events_llm_done ON events(ts) WHERE type = 'llm_call_done';`); err != nil {
			return err
		}
	}
	next := `SELECT max(s.last_seq, COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.session_id = s.session_id), 0)) + 1 FROM sessions s WHERE s.session_id = ?`
	if *seqFrom == "counter" {
		next = `UPDATE sessions SET last_seq = last_seq + 1 WHERE session_id = ? RETURNING last_seq`
	}
	// Prepared once, as the server's SQLite pipe does.
	nextStmt, err := db.PrepareContext(ctx, next)
	if err != nil {
		return err
	}
	defer nextStmt.Close()
	insert, err := db.PrepareContext(ctx, `INSERT INTO events (event_id, session_id, seq, run_id, parent_run_id, ts, type, payload) VALUES (?, ?, ?, ?, '', ?, 'agent_stream_delta', ?)`)
	if err != nil {
		return err
	}
	defer insert.Close()
	r := rand.New(rand.NewSource(1))
	commit := func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		nextTx, insertTx := tx.StmtContext(ctx, nextStmt), tx.StmtContext(ctx, insert)
		for _, i := range r.Perm(*sessions)[:*per] {
			var seq int64
			if err := nextTx.QueryRowContext(ctx, sids[i]).Scan(&seq); err != nil {
				return err
			}
			if _, err := insertTx.ExecContext(ctx, ids.New("evt"), sids[i], seq, runIDs[i], time.Now().UnixMilli(), `{"text":"token `+strings.Repeat("x", r.Intn(20))+`"}`); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
	for range *prefill * *sessions / *per {
		if err := commit(); err != nil {
			return err
		}
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return err
	}
	var pageSize int64
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		return err
	}
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	for range *commits {
		if err := commit(); err != nil {
			return err
		}
	}
	wall := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())

	// The WAL: a 32-byte header, then frames of a 24-byte header (the
	// page number first, big-endian) and one page. dbstat names each
	// page's b-tree.
	wal, err := os.ReadFile(path + "-wal")
	if err != nil {
		return err
	}
	owner := map[uint32]string{}
	rows, err := db.QueryContext(ctx, `SELECT pageno, name FROM dbstat`)
	if err != nil {
		return fmt.Errorf("dbstat: %w", err)
	}
	for rows.Next() {
		var pg uint32
		var name string
		if err := rows.Scan(&pg, &name); err != nil {
			return err
		}
		owner[pg] = name
	}
	rows.Close()
	byTree := map[string]int{}
	frames := 0
	for off := int64(32); off+24+pageSize <= int64(len(wal)); off += 24 + pageSize {
		pg := binary.BigEndian.Uint32(wal[off:])
		name := owner[pg]
		if pg == 1 {
			name = "header page (page 1)"
		}
		byTree[name]++
		frames++
	}
	names := make([]string, 0, len(byTree))
	for n := range byTree {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return byTree[names[i]] > byTree[names[j]] })
	n := float64(*commits)
	fmt.Printf("# WAL frames per commit: %d sessions, %d events per commit in as many sessions, %d events per session before, seq from %s, events table without rowid: %v\n",
		*sessions, *per, *prefill, *seqFrom, *noRowid)
	fmt.Printf("%.1f frames (%.0f KB) per commit; %.0f µs CPU and %.0f µs wall per commit (synchronous FULL)\n",
		float64(frames)/n, float64(frames)*float64(pageSize+24)/n/1024, float64(cpu.Microseconds())/n, float64(wall.Microseconds())/n)
	for _, name := range names {
		fmt.Printf("  %-32s %5.2f\n", name, float64(byTree[name])/n)
	}
	return nil
}
