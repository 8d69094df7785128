package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

func openDirect(t *testing.T) (*sqlstore.DB, *direct, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agentplane.db")
	db, dt, err := open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, dt, path
}

// inPipe runs fn as a transaction of dt on the writer's connection,
// committing when fn returns nil.
func inPipe(t *testing.T, db *sqlstore.DB, dt *direct, fn func(p sqlstore.Pipe) error) error {
	t.Helper()
	ctx := context.Background()
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return dt.pipeline(ctx, conn, func(p sqlstore.Pipe) error {
		if err := fn(p); err != nil {
			p.Rollback(ctx)
			return err
		}
		return p.Commit(ctx)
	})
}

// A transaction's statements, its BEGIN and COMMIT among them, are
// prepared once on the writer's connection and reused by every later
// transaction; a store's Close finalizes them, so that SQLite's
// connection really closes (the last one checkpoints the WAL and removes
// it: a statement left open would keep it).
func TestTransactionStatementsPreparedOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentplane.db")
	db, dt, err := open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "s", UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	appendOne := func() {
		t.Helper()
		if err := db.InTx(ctx, func(tx store.Queries) error {
			_, err := tx.EventsAppend(ctx, []store.EventParams{{SessionID: "s", TS: 1, Type: "t", Payload: json.RawMessage(`{}`)}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	appendOne()
	prepared := len(dt.stmts)
	for _, q := range []string{"BEGIN IMMEDIATE", "COMMIT"} {
		if dt.stmts[q] == nil {
			t.Fatalf("%q not prepared: %v", q, keys(dt.stmts))
		}
	}
	for range 50 {
		appendOne()
	}
	if len(dt.stmts) != prepared {
		t.Fatalf("%d statements prepared after 51 transactions, %d after the first: %v", len(dt.stmts), prepared, keys(dt.stmts))
	}
	evs, err := db.EventsList(ctx, &store.EventsListParams{SessionID: "s", Limit: 100})
	if err != nil || len(evs) != 51 || evs[50].Seq != 51 {
		t.Fatalf("%d events (%v) after 51 transactions", len(evs), err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if dt.stmts != nil {
		t.Fatalf("statements left after Close: %v", keys(dt.stmts))
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the WAL is still there after Close (a connection did not close): %v", err)
	}
}

func keys(m map[string]driver.Stmt) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A queued statement that fails fails the transaction as on PostgreSQL:
// the next call returns its error without running, the commit too, and
// nothing of the transaction is kept. A read's rows left open are closed
// by the next statement.
func TestQueuedFailureFailsTransaction(t *testing.T) {
	ctx := context.Background()
	db, dt, _ := openDirect(t)
	if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := inPipe(t, db, dt, func(p sqlstore.Pipe) error {
		p.Queue(`INSERT INTO kv (k, v) VALUES (?, ?)`, []any{"a", 1})
		var v int64
		p.QueueRow(`SELECT v FROM kv WHERE k = ?`, []any{"a"}, func(scan func(dest ...any) error) error { return scan(&v) })
		if _, err := p.Query(ctx, `SELECT k FROM kv`, nil); err != nil { // left open
			return err
		}
		if n, err := p.Exec(ctx, `UPDATE kv SET v = v + 1 WHERE k = ?`, []any{"a"}); err != nil || n != 1 {
			t.Fatalf("update with rows left open: %d, %v", n, err)
		}
		if v != 1 {
			t.Fatalf("queued row scanned %d", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	var queued error
	err := inPipe(t, db, dt, func(p sqlstore.Pipe) error {
		p.Queue(`INSERT INTO kv (k, v) VALUES (?, ?)`, []any{"b", 1})
		p.Queue(`INSERT INTO kv (k, v) VALUES (?, ?)`, []any{"a", 1}) // a duplicate
		p.Queue(`INSERT INTO kv (k, v) VALUES (?, ?)`, []any{"c", 1}) // not run
		_, queued = p.Exec(ctx, `INSERT INTO kv (k, v) VALUES (?, ?)`, []any{"d", 1})
		if queued == nil {
			t.Fatal("the call after a failed queued statement succeeded")
		}
		if err := p.Commit(ctx); !errors.Is(err, queued) {
			t.Fatalf("commit after a failed queued statement: %v", err)
		}
		return queued
	})
	if err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Fatalf("transaction error %v, want the duplicate's", err)
	}
	rows, err := db.SQL().QueryContext(ctx, `SELECT k, v FROM kv ORDER BY k`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		got = append(got, k+"="+string(rune('0'+v)))
	}
	if strings.Join(got, ",") != "a=2" {
		t.Fatalf("kept %v, want only the first transaction's a=2", got)
	}
}

// A transaction whose function panics is rolled back, and the store goes
// on (database/sql discards the connection; the next one prepares anew).
func TestPanicInTransactionRollsBack(t *testing.T) {
	ctx := context.Background()
	db, dt, _ := openDirect(t)
	if _, err := db.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "s", UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	appendOne := func() error {
		return db.InTx(ctx, func(tx store.Queries) error {
			_, err := tx.EventsAppend(ctx, []store.EventParams{{SessionID: "s", TS: 1, Type: "t"}})
			return err
		})
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		_ = db.InTx(ctx, func(tx store.Queries) error {
			if _, err := tx.EventsAppend(ctx, []store.EventParams{{SessionID: "s", TS: 1, Type: "lost"}}); err != nil {
				return err
			}
			panic("in the transaction")
		})
	}()
	if err := appendOne(); err != nil {
		t.Fatal(err)
	}
	evs, err := db.EventsList(ctx, &store.EventsListParams{SessionID: "s", Limit: 10})
	if err != nil || len(evs) != 1 || evs[0].Type != "t" || evs[0].Seq != 1 {
		t.Fatalf("events after a panicked transaction and one more: %+v, %v", evs, err)
	}
	if dt.conn == nil || len(dt.stmts) == 0 {
		t.Fatal("no statements prepared on the connection in use")
	}
}

// The event log's transactions run with a context that cannot end: then
// neither database/sql nor the driver starts a goroutine for one (the
// reason for the direct path: three per transaction before).
func TestTransactionStartsNoGoroutine(t *testing.T) {
	ctx := context.Background()
	db, _, _ := openDirect(t)
	if _, err := db.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "s", UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	created := func() uint64 {
		m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(m)
		return m[0].Value.Uint64()
	}
	const n = 100
	before := created()
	for range n {
		if err := db.InTx(ctx, func(tx store.Queries) error {
			_, err := tx.EventsAppend(ctx, []store.EventParams{{SessionID: "s", TS: 1, Type: "t"}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A few for the background checkpoint's passes, none per transaction.
	if d := created() - before; d >= n/4 {
		t.Fatalf("%d goroutines started by %d transactions", d, n)
	}
}

// Values come back from the direct path as database/sql scans them.
func TestConvertAssign(t *testing.T) {
	type status string
	var (
		s   string
		b   []byte
		raw json.RawMessage
		i64 int64
		i   int
		f   float64
		ok  bool
		st  status
		a   any
		ns  sql.NullString
		ni  sql.NullInt64
	)
	for _, c := range []struct {
		dest, src any
		check     func() bool
	}{
		{&s, "text", func() bool { return s == "text" }},
		{&s, []byte("bytes"), func() bool { return s == "bytes" }},
		{&s, int64(42), func() bool { return s == "42" }},
		{&b, []byte("b"), func() bool { return string(b) == "b" }},
		{&b, nil, func() bool { return b == nil }},
		{&raw, `{"a":1}`, func() bool { return string(raw) == `{"a":1}` }},
		{&i64, int64(-7), func() bool { return i64 == -7 }},
		{&i, int64(7), func() bool { return i == 7 }},
		{&i, "8", func() bool { return i == 8 }},
		{&f, int64(2), func() bool { return f == 2 }},
		{&f, 2.5, func() bool { return f == 2.5 }},
		{&ok, int64(1), func() bool { return ok }},
		{&st, "RUNNING", func() bool { return st == "RUNNING" }},
		{&a, int64(3), func() bool { return a == int64(3) }},
		{&ns, nil, func() bool { return !ns.Valid }},
		{&ns, "x", func() bool { return ns.Valid && ns.String == "x" }},
		{&ni, int64(9), func() bool { return ni.Valid && ni.Int64 == 9 }},
	} {
		if err := convertAssign(c.dest, c.src); err != nil || !c.check() {
			t.Errorf("convertAssign(%T, %#v): %v", c.dest, c.src, err)
		}
	}
	// The driver's bytes are copied: it may reuse them for its next row.
	src := []byte("abc")
	if err := convertAssign(&b, src); err != nil {
		t.Fatal(err)
	}
	src[0] = 'x'
	if string(b) != "abc" {
		t.Fatalf("[]byte shares the driver's bytes: %q", b)
	}
	for _, c := range []struct{ dest, src any }{
		{&s, nil}, {&i64, nil}, {&i, "x"}, {&i, []byte("1.5")}, {s, "not a pointer"},
	} {
		if err := convertAssign(c.dest, c.src); err == nil {
			t.Errorf("convertAssign(%T, %#v) succeeded", c.dest, c.src)
		}
	}
}

// A statement's arguments are converted into a buffer the next statement
// reuses: each statement binds its own values — a shorter one after a
// longer one, one run while a query's rows are still open — and no value
// of an earlier statement stays referenced by the buffer.
func TestStatementArgumentsReused(t *testing.T) {
	db, dt, _ := openDirect(t)
	ctx := context.Background()
	big := strings.Repeat("x", 1<<16)
	err := inPipe(t, db, dt, func(p sqlstore.Pipe) error {
		if _, err := p.Exec(ctx, `CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT, n INTEGER)`, nil); err != nil {
			return err
		}
		if _, err := p.Exec(ctx, `INSERT INTO kv (k, v, n) VALUES (?, ?, ?), (?, ?, ?)`, []any{"a", big, 1, "b", "short", 2}); err != nil {
			return err
		}
		rs, err := p.Query(ctx, `SELECT v FROM kv WHERE k = ?`, []any{"b"})
		if err != nil {
			return err
		}
		// Rows open: the next statement closes them, then reuses the buffer.
		if _, err := p.Exec(ctx, `UPDATE kv SET n = ? WHERE k = ?`, []any{int32(7), "a"}); err != nil {
			return err
		}
		if rs.Next() {
			t.Error("rows of a query still readable after the next statement")
		}
		var v string
		var n int64
		if err := sqlstore.ScanFirst(mustQuery(t, p, `SELECT v, n FROM kv WHERE k = ?`, "a"), &v, &n); err != nil {
			return err
		}
		if v != big || n != 7 {
			t.Errorf("row a: %d bytes, n %d; want %d bytes, n 7", len(v), n, len(big))
		}
		if _, err := p.Exec(ctx, `DELETE FROM kv WHERE k = 'none'`, nil); err != nil {
			return err
		}
		for i, nv := range dt.named[:cap(dt.named)] {
			if nv.Value != nil {
				t.Errorf("argument buffer [%d] still holds %T after a statement without arguments", i, nv.Value)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustQuery(t *testing.T, p sqlstore.Pipe, query string, args ...any) sqlstore.Rows {
	t.Helper()
	rs, err := p.Query(context.Background(), query, args)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
