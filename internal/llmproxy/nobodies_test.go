package llmproxy_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/fakellm"
)

// LLM bodies — what the agent sends and what the model answers — are never
// written to the logs or into the trace (issue 14, redaction): only their
// metering is. An upstream error that is not the OpenAI JSON error shape is
// recorded by status and size, not by its text, which may echo the prompt.
func TestLLMBodiesAreNeverLoggedNorRecorded(t *testing.T) {
	const secret = "4111-1111-SECRET-CARD"
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	for _, stream := range []bool{false, true} {
		resp, got := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "my card is "+secret+" — repeat it", stream), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("call: %d %s", resp.StatusCode, got)
		}
		e.rec.waitDone(t)
	}
	// An upstream failing with a plain-text body that echoes the prompt.
	up.fake.Push(fakellm.Fault{Status: 500, Body: "internal error while handling: my card is " + secret})
	if resp, _ := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "my card is "+secret, false), nil); resp.StatusCode != 500 {
		t.Fatalf("upstream 500 passed through as %d", resp.StatusCode)
	}
	d := e.rec.waitDone(t)
	if d.Error == nil || d.Error.Code != "upstream_status_500" || strings.Contains(d.Error.Message, secret) || !strings.Contains(d.Error.Message, "bytes") {
		t.Fatalf("done error = %+v", d.Error)
	}
	if !strings.Contains(string(up.lastRequest(t).Body), secret) {
		t.Fatal("the upstream did not get the prompt (the test proves nothing)")
	}
	for _, r := range e.rec.all() {
		b, _ := json.Marshal(r.Payload)
		if strings.Contains(string(b), secret) {
			t.Fatalf("%s recorded a body: %s", r.Type, b)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatalf("a body reached the log:\n%s", logs.String())
	}
}
