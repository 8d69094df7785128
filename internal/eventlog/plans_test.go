package eventlog

import (
	"os"
	"testing"

	"github.com/agentplane/agentplane/internal/testdb"
)

// Every statement these tests run on SQLite has its plan checked: none may
// scan a table that grows (testdb.AuditQueryPlans).
func TestMain(m *testing.M) { os.Exit(testdb.AuditQueryPlans(m)) }
