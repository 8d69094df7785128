package storetest

import (
	"os"
	"testing"

	"github.com/agentplane/agentplane/internal/testdb"
)

// Every statement the suite runs on SQLite has its plan checked: none may
// scan a table that grows (testdb.AuditQueryPlans).
func TestMain(m *testing.M) { os.Exit(testdb.AuditQueryPlans(m)) }
