package e2e

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// demoKeysRE reads the keys `serve --demo` prints.
var (
	demoAdminKeyRE = regexp.MustCompile(`(?m)^admin key: (\S+) \(kept in (.+), table settings`)
	demoUserKeyRE  = regexp.MustCompile(`(?m)^demo user key: (\S+) \(kept in (.+), table settings`)
	demoChatURLRE  = regexp.MustCompile(`(?m)^open the chat: (\S+)$`)
)

// TestDemoKeysSurviveRestart (issue 8 item 16): `serve --demo` without
// AGENTPLANE_ADMIN_KEY / AGENTPLANE_API_KEYS prints the same admin and user
// keys at every start on the same database, says where they are kept, and
// the chat of the first start (its key, its session) still works after a
// restart — the demo agent, re-registered with a new key, answers too.
func TestDemoKeysSurviveRestart(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		if strings.HasPrefix(dsn, "sqlite:") {
			dsn = "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
		}
		noKeys := []string{"AGENTPLANE_ADMIN_KEY=", "AGENTPLANE_API_KEYS="}
		first := startDemoOn(t, dsn, noKeys)
		out1 := first.output()
		admin1, user1 := demoAdminKeyRE.FindStringSubmatch(out1), demoUserKeyRE.FindStringSubmatch(out1)
		if admin1 == nil || user1 == nil || !strings.HasPrefix(admin1[1], "adm_") || !strings.HasPrefix(user1[1], "usr_") {
			t.Fatalf("first start printed no kept keys:\n%s", out1)
		}
		if strings.HasPrefix(dsn, "sqlite:") && admin1[2] != strings.TrimPrefix(dsn, "sqlite:") {
			t.Errorf("keys said to be kept in %q, the database is %s", admin1[2], dsn)
		}
		if strings.Contains(out1, "postgres@") || strings.Contains(out1, "password") {
			t.Errorf("the output names database credentials:\n%s", out1)
		}

		c := dial(t, first, "demo", user1[1])
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "demo", "message": map[string]any{"role": "user", "content": "hello before the restart"}})
		msgs := c.untilEnd()
		if msgs[len(msgs)-1]["type"] != "done" {
			t.Fatalf("first run: %v", msgs)
		}
		sid := msgs[0]["session_id"].(string)
		first.stop()

		second := startDemoOn(t, dsn, noKeys)
		out2 := second.output()
		admin2, user2 := demoAdminKeyRE.FindStringSubmatch(out2), demoUserKeyRE.FindStringSubmatch(out2)
		if admin2 == nil || user2 == nil || admin2[1] != admin1[1] || user2[1] != user1[1] {
			t.Fatalf("keys changed across a restart:\nfirst:\n%s\nsecond:\n%s", out1, out2)
		}
		chat := demoChatURLRE.FindStringSubmatch(out2)
		if chat == nil || !strings.HasSuffix(chat[1], "/#user=demo&key="+user1[1]+"&agent=demo") {
			t.Fatalf("chat URL: %v\n%s", chat, out2)
		}

		// The old tab: the same key, the same session, a new message.
		c = dial(t, second, "demo", user1[1])
		c.send(map[string]any{"type": "subscribe", "request_id": "s", "session_id": sid, "after_seq": 0})
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r2", "session_id": sid, "agent_id": "demo", "message": map[string]any{"role": "user", "content": "hello after the restart"}})
		firstRun := msgs[0]["run_id"]
		var replayed bool
		var reply []map[string]any
		for {
			m := c.next()
			if m["type"] == "run_started" && m["run_id"] == firstRun {
				replayed = true
			}
			if m["run_id"] == firstRun || m["run_id"] == nil {
				continue
			}
			reply = append(reply, m)
			if isEnd(m) {
				break
			}
		}
		if end := reply[len(reply)-1]; end["type"] != "done" || !strings.Contains(text(reply), "hello after the restart") {
			t.Fatalf("after the restart: %q ended %v", text(reply), end)
		}
		if !replayed {
			t.Error("the old session was not replayed")
		}
		// The old admin key works too.
		code, _ := second.call("GET", "/v1/sessions/"+sid+"/events", admin1[1], nil)
		if code != http.StatusOK {
			t.Errorf("admin key of the first start: %d", code)
		}
	})
}

// TestDemoKeysFromEnvironment: keys the operator sets win and are not stored.
func TestDemoKeysFromEnvironment(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	s := startDemoOn(t, dsn, []string{"AGENTPLANE_ADMIN_KEY=my-admin-key-0123456789", "AGENTPLANE_API_KEYS=demo:my-demo-key-0123456789"})
	out := s.output()
	if strings.Contains(out, "my-admin-key") || strings.Contains(out, "table settings") ||
		!strings.Contains(out, "demo user key: my-demo-key-0123456789 (from AGENTPLANE_API_KEYS)") {
		t.Fatalf("output with keys from the environment:\n%s", out)
	}
	c := dial(t, s, "demo", "my-demo-key-0123456789")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "demo", "message": map[string]any{"role": "user", "content": "hi"}})
	if msgs := c.untilEnd(); msgs[len(msgs)-1]["type"] != "done" {
		t.Fatalf("run: %v", msgs)
	}
}

// TestChatExampleAgainstTheDemo runs the terminal chat client
// (examples/python/chat.py) as its README says, against `serve --demo`: a
// question without a city makes the demo agent ask back (input_required),
// which the client shows and ends the turn on; the next message answers it
// and the weather tool's result streams back.
func TestChatExampleAgainstTheDemo(t *testing.T) {
	s := startDemo(t)
	user := demoUserKeyRE.FindStringSubmatch(s.output())
	if user == nil {
		t.Fatalf("no demo user key:\n%s", s.output())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "python3", filepath.Join(repoRoot, "examples", "python", "chat.py"),
		"--url", s.URL, "--user", "demo", "--api-key", user[1], "--agent", "demo", "What's the weather?", "Oslo").CombinedOutput()
	if err != nil {
		t.Fatalf("chat.py: %v\n%s", err, out)
	}
	text := string(out)
	ask, answer := strings.Index(text, "? Which city?"), strings.Index(text, "Tool result: city: Oslo")
	if ask < 0 || answer < ask || !strings.Contains(text, "(done, usage") {
		t.Fatalf("chat.py printed:\n%s", text)
	}
}
