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
	for _, f := range []string{"static/app.js", "static/chat.js", "static/chatview.js", "testdata/chat_core_test.js"} {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"--check", "static/app.js"},
		{"--check", "static/chat.js"},
		{"--check", "static/chatview.js"},
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

// TestTimelineModel runs testdata/timeline_test.js, which folds a run's events — an LLM call, a
// tool call through policy and approval, a sub-agent, overlapping pages — with the console's
// real timeline model (static/timeline.js), and checks every console script parses.
func TestTimelineModel(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	scripts := []string{"console.js", "timeline.js", "pages.js", "session.js", "replay.js", "boot.js"}
	for _, f := range append(scripts, "../testdata/timeline_test.js") {
		if _, err := os.ReadFile("static/" + f); err != nil {
			t.Fatal(err)
		}
	}
	var runs [][]string
	for _, f := range scripts {
		runs = append(runs, []string{"--check", "static/" + f})
	}
	runs = append(runs, []string{"testdata/timeline_test.js"})
	for _, args := range runs {
		out, err := exec.CommandContext(t.Context(), node, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("node %v: %v\n%s", args, err, out)
		}
	}
}
