package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPythonSDK runs the Python SDK's own unittest suite, so `go test ./...`
// covers it too.
func TestPythonSDK(t *testing.T) {
	cmd := exec.Command("python3", "-m", "unittest", "-v")
	cmd.Dir = filepath.Join(repoRoot, "sdk", "python")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python SDK tests failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "OK") {
		t.Fatalf("unexpected unittest output:\n%s", out)
	}
}
