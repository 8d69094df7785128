package agentplane_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// event is one SSE event, or a comment line (Name "" and Comment set).
type event struct {
	Name    string
	Data    map[string]any
	Comment string
}

// sseReader parses a text/event-stream incrementally, as the platform does.
type sseReader struct{ br *bufio.Reader }

func newSSEReader(r io.Reader) *sseReader { return &sseReader{br: bufio.NewReader(r)} }

// next returns the next event or comment; io.EOF at the end of the stream.
func (r *sseReader) next() (event, error) {
	var ev event
	var data []string
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && ev.Name == "" && data == nil {
				return event{}, io.EOF
			}
			return event{}, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if ev.Name == "" && data == nil {
				continue
			}
			if err := json.Unmarshal([]byte(strings.Join(data, "\n")), &ev.Data); err != nil {
				return event{}, err
			}
			return ev, nil
		case strings.HasPrefix(line, ":"):
			return event{Comment: line}, nil
		case strings.HasPrefix(line, "event:"):
			ev.Name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// events reads the rest of the stream; comments only if withComments.
func (r *sseReader) events(t *testing.T, withComments bool) []event {
	t.Helper()
	var out []event
	for {
		ev, err := r.next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		if ev.Name != "" || withComments {
			out = append(out, ev)
		}
	}
}

func defaultBody() map[string]any {
	return map[string]any{
		"agent_id":      "echo",
		"session_id":    "ses_1",
		"run_id":        "run_1",
		"input_message": map[string]any{"role": "user", "content": "hi"},
		"messages":      []any{map[string]any{"role": "user", "content": "hi"}},
		"context":       map[string]any{"user_id": "u1"},
	}
}

// startAgent serves h like a deployed agent; configure tweaks the handler.
func startAgent(t *testing.T, h agentplane.HandlerFunc, configure ...func(*agentplane.AgentHandler)) *httptest.Server {
	t.Helper()
	ah := &agentplane.AgentHandler{Handler: h}
	for _, f := range configure {
		f(ah)
	}
	srv := httptest.NewServer(ah)
	t.Cleanup(srv.Close)
	return srv
}

// invoke posts body (defaultBody if nil) to /invoke and checks the stream's headers.
func invoke(t *testing.T, ctx context.Context, srv *httptest.Server, body any, hdr http.Header) *http.Response {
	t.Helper()
	if body == nil {
		body = defaultBody()
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/invoke", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-run-id", "run_1")
	req.Header.Set("x-session-id", "ses_1")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("invoke: status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q, want text/event-stream", ct)
	}
	return resp
}

// invokeEvents invokes and returns every event of the stream.
func invokeEvents(t *testing.T, srv *httptest.Server, body any) []event {
	t.Helper()
	return newSSEReader(invoke(t, context.Background(), srv, body, nil).Body).events(t, false)
}

// recorded is one request seen by fakePlatform.
type recorded struct {
	Method string
	Path   string // escaped, as sent on the wire
	Query  map[string][]string
	Header http.Header
	Body   map[string]any
}

// fakePlatform is a real HTTP server standing in for the platform's agent
// API. routes maps "METHOD /escaped/path" to a JSON answer; unknown routes
// get the platform's 404 error shape.
type fakePlatform struct {
	*httptest.Server
	mu       sync.Mutex
	requests []recorded
}

type reply struct {
	Status int
	Body   any // []byte is sent verbatim, anything else as JSON
}

func newFakePlatform(t *testing.T, routes map[string]func(recorded) reply) *fakePlatform {
	t.Helper()
	fp := &fakePlatform{}
	fp.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		rec := recorded{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(), Header: r.Header.Clone()}
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &rec.Body); err != nil {
				t.Errorf("platform got a non-JSON body %q: %v", raw, err)
			}
		}
		fp.mu.Lock()
		fp.requests = append(fp.requests, rec)
		fp.mu.Unlock()
		rep := reply{Status: http.StatusNotFound, Body: map[string]any{"error": map[string]any{"code": "not_found", "message": "no route " + r.Method + " " + rec.Path}}}
		if f, ok := routes[r.Method+" "+rec.Path]; ok {
			rep = f(rec)
		}
		out, ok := rep.Body.([]byte)
		if !ok {
			out, _ = json.Marshal(rep.Body)
		}
		if ra := retryAfterOf(rep.Body); ra != "" && (rep.Status == http.StatusTooManyRequests || rep.Status == http.StatusServiceUnavailable) {
			// As the platform does (respond.Err): the error's retry_after
			// (whole seconds) goes in Retry-After too.
			w.Header().Set("Retry-After", ra)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		w.Write(out)
	}))
	t.Cleanup(fp.Close)
	return fp
}

// retryAfterOf is the error's retry_after of a reply body, as text; "" if none.
func retryAfterOf(body any) string {
	m, _ := body.(map[string]any)
	e, _ := m["error"].(map[string]any)
	if ra, ok := e["retry_after"]; ok {
		return fmt.Sprint(ra)
	}
	return ""
}

func (fp *fakePlatform) last(t *testing.T) recorded {
	t.Helper()
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if len(fp.requests) == 0 {
		t.Fatal("platform received no request")
	}
	return fp.requests[len(fp.requests)-1]
}

func (fp *fakePlatform) count() int {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return len(fp.requests)
}

func okJSON(body any) func(recorded) reply {
	return func(recorded) reply { return reply{Status: http.StatusOK, Body: body} }
}

// discardLogger keeps expected handler failures out of the test output.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
