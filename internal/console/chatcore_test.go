package console_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestChatCore runs testdata/chat_core_test.js, which drives the page's real protocol code
// (static/chat.js) through connect, stream, dedupe, reconnect, replay, cancel, client tool
// requests and approvals with a fake socket. It needs node; without it the test is skipped and
// the browser test covers the page.
func TestChatCore(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	// go test caches a passing result by the files the test process itself opens; node's reads
	// do not count, so open the scripts here to have an edit rerun the test.
	for _, f := range []string{"static/app.js", "static/chat.js", "testdata/chat_core_test.js"} {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"--check", "static/app.js"},
		{"--check", "static/chat.js"},
		{"testdata/chat_core_test.js"},
	} {
		out, err := exec.CommandContext(t.Context(), node, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("node %v: %v\n%s", args, err, out)
		}
		if testing.Verbose() {
			t.Logf("node %v:\n%s", args, out)
		}
	}
}
