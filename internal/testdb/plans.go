package testdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store/sqlite"
)

// The query-plan audit. A statement that filters on a column whose index
// is partial ("WHERE intention_id <> ''") cannot use that index unless the
// statement repeats the index's condition — SQLite (and PostgreSQL's
// generic plans) cannot prove that a bound "intention_id = ?" implies it —
// so it scans the whole table instead: invisible in a test's small tables,
// and a cost that grows with every run the platform has ever had (issue
// 10's A2A benchmark found two such statements on a run's path). The audit
// collects every statement a package's tests run on SQLite and checks each
// one's plan.

var planAudit struct {
	sync.Mutex
	on   bool
	seen map[string]bool
}

// growing are the tables that grow with use: a statement must reach their
// rows through an index search, never a scan of the table or of a whole
// index.
var growing = []string{"runs", "tool_calls", "events", "messages", "approvals", "sessions", "audit_log"}

// boundedIndexes are partial indexes that hold only live rows (active
// runs, queued runs, pending approvals, calls with a deadline): scanning
// one costs what is in flight, not the history.
var boundedIndexes = []string{"runs_active", "runs_active_roots", "runs_active_owner", "runs_active_user", "runs_queue",
	"approvals_pending", "tool_calls_due", "tool_calls_waiting_client"}

// planScanAllowed are statements that scan a growing table on purpose,
// each a substring of the statement: the operator listings (GET
// /v1/sessions, /v1/runs, /v1/approvals, built on "WHERE 1 = 1") walk an
// index in the order asked and stop at their page size.
var planScanAllowed = []string{"WHERE 1 = 1"}

// AuditQueryPlans runs a package's tests (call it from TestMain) with every
// SQLite statement recorded, then checks the plan of each: one that scans a
// growing table fails the package, naming the statement and its plan.
func AuditQueryPlans(m *testing.M) int {
	planAudit.Lock()
	planAudit.on, planAudit.seen = true, map[string]bool{}
	planAudit.Unlock()
	code := m.Run()
	if code != 0 {
		return code
	}
	bad, err := checkPlans()
	if err != nil {
		fmt.Fprintln(os.Stderr, "query-plan audit:", err)
		return 1
	}
	if len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "query-plan audit: %d statements scan a table that grows (repeat a partial index's condition in the statement, or add an index):\n", len(bad))
		for _, b := range bad {
			fmt.Fprintln(os.Stderr, b)
		}
		return 1
	}
	return 0
}

// observe records a statement when the audit is on.
func observe(query string) {
	planAudit.Lock()
	if planAudit.on {
		planAudit.seen[query] = true
	}
	planAudit.Unlock()
}

func auditing() bool {
	planAudit.Lock()
	defer planAudit.Unlock()
	return planAudit.on
}

var scanLine = regexp.MustCompile(`^SCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?`)

// checkPlans explains every recorded statement on a fresh, migrated SQLite
// database and returns those that scan a growing table.
func checkPlans() ([]string, error) {
	dir, err := os.MkdirTemp("", "agentplane-plans")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "plans.db"))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	db := st.SQL()
	planAudit.Lock()
	queries := make([]string, 0, len(planAudit.seen))
	for q := range planAudit.seen {
		queries = append(queries, q)
	}
	planAudit.Unlock()
	slices.Sort(queries)
	var bad []string
	for _, q := range queries {
		if !explainable(q) || allowedScan(q) {
			continue
		}
		args := make([]any, strings.Count(q, "?"))
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			return nil, fmt.Errorf("explain %q: %w", q, err)
		}
		var plan []string
		scans := false
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				rows.Close()
				return nil, err
			}
			plan = append(plan, detail)
			if m := scanLine.FindStringSubmatch(detail); m != nil && slices.Contains(growing, m[1]) && !slices.Contains(boundedIndexes, m[2]) {
				scans = true
			}
		}
		rows.Close()
		if scans {
			bad = append(bad, fmt.Sprintf("  %s\n    plan: %s", oneLine(q), strings.Join(plan, " | ")))
		}
	}
	return bad, nil
}

// explainable: statements that have a plan worth checking.
func explainable(q string) bool {
	head := strings.ToUpper(strings.TrimSpace(q))
	for _, p := range []string{"SELECT", "UPDATE", "DELETE", "INSERT", "WITH"} {
		if strings.HasPrefix(head, p) {
			return !strings.Contains(strings.TrimRight(strings.TrimSpace(q), ";"), ";")
		}
	}
	return false
}

func allowedScan(q string) bool {
	for _, a := range planScanAllowed {
		if strings.Contains(q, a) {
			return true
		}
	}
	return false
}

func oneLine(q string) string { return strings.Join(strings.Fields(q), " ") }
