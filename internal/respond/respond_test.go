package respond

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

type registration struct {
	AgentID      string   `json:"agent_id"`
	Capabilities []string `json:"capabilities"`
	Policy       struct {
		Rules []struct {
			When string `json:"when"`
		} `json:"rules"`
	} `json:"policy"`
	Timeout int64    `json:"timeout_ms"`
	Weight  *float64 `json:"weight"`
	Meta    map[string]any
}

// Decode errors name the field and the JSON it wants, never a Go type.
func TestJSONMessageSpeaksJSON(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"capabilities":"chat"}`, "capabilities: expected an array of strings, got string"},
		{`{"agent_id":5}`, "agent_id: expected a string, got number"},
		{`{"timeout_ms":1.5}`, "timeout_ms: expected an integer, got number 1.5"},
		{`{"weight":"x"}`, "weight: expected a number, got string"},
		{`{"policy":{"rules":[{"when":true}]}}`, "policy.rules.when: expected a string, got bool"},
		{`{"policy":[]}`, "policy: expected an object, got array"},
		{`[1,2]`, "expected an object, got array"},
		{`{"agent_id":"a",}`, "invalid JSON at byte 17: invalid character '}' looking for beginning of object key string"},
		{`{"agent_id":`, "the JSON ends early"},
		{``, "the body is empty; send a JSON object"},
		{`{"polcy":{}}`, `unknown field "polcy"`},
	} {
		var v registration
		dec := json.NewDecoder(strings.NewReader(tc.body))
		dec.DisallowUnknownFields()
		err := dec.Decode(&v)
		if err == nil {
			t.Fatalf("%s decoded", tc.body)
		}
		got := JSONMessage(err)
		if got != tc.want {
			t.Errorf("%s: %q, want %q (from %q)", tc.body, got, tc.want, err)
		}
		if strings.Contains(got, "Go ") || strings.Contains(got, "registration") || strings.Contains(got, "[]string") {
			t.Errorf("%s: %q names Go types", tc.body, got)
		}
	}
}

func TestDecodeRefusals(t *testing.T) {
	post := func(body string, strict bool) *Error {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		var v registration
		var err error
		if strict {
			err = DecodeJSONStrict(httptest.NewRecorder(), r, 1<<10, &v)
		} else {
			err = DecodeJSON(httptest.NewRecorder(), r, 1<<10, &v)
		}
		if err == nil {
			return nil
		}
		return err.(*Error)
	}
	if e := post(`{"agent_id":"`+strings.Repeat("x", 2000)+`"}`, false); e == nil || e.Status != 413 || e.Message != "request body exceeds 1 KiB" {
		t.Errorf("oversize: %v", e)
	}
	if e := post(`{"extra":1}`, false); e != nil {
		t.Errorf("lenient decode refused an unknown field: %v", e)
	}
	if e := post(`{"extra":1}`, true); e == nil || e.Status != 400 || e.Message != `unknown field "extra"` {
		t.Errorf("strict decode: %v", e)
	}
	if e := post(`{} {}`, false); e == nil || e.Message != "trailing data after the JSON body" {
		t.Errorf("trailing data: %v", e)
	}
	// The server's body read deadline passing.
	if e := BodyError(fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)); e.Status != 408 || e.Code != "request_timeout" {
		t.Errorf("deadline: %v", e)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{1 << 20: "1 MiB", 16 << 20: "16 MiB", 4096: "4 KiB", 1000: "1000 bytes", 1<<20 + 1: "1048577 bytes"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

// A request whose client went away is not a server failure: it is not
// logged at ERROR (it used to be, as "request failed … context canceled").
func TestErrDoesNotLogCancelledRequestsAsErrors(t *testing.T) {
	var logs bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("GET", "/v1/sessions/s/events", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	Err(w, r, fmt.Errorf("list events: %w", context.Canceled))
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Fatalf("a cancelled request was logged as an error: %s", logs.String())
	}
	if w.Code != StatusClientClosedRequest {
		t.Fatalf("status %d", w.Code)
	}

	// A real failure still is.
	logs.Reset()
	Err(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), fmt.Errorf("list events: %w", context.Canceled))
	if !strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Fatalf("a failure with a live client was not logged as an error: %s", logs.String())
	}
}
