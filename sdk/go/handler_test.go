package agentplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// wait bounds "eventually" in these tests; they normally finish far sooner.
const wait = 5 * time.Second

func ev(name string, data map[string]any) event { return event{Name: name, Data: data} }

func TestInvokeStreamsEventsInOrder(t *testing.T) {
	var got *agentplane.Request
	srv := startAgent(t, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		got = req
		if err := s.State("thinking", map[string]any{"step": 1}); err != nil {
			return err
		}
		s.Delta("a")
		s.Delta("") // skipped: an empty delta says nothing
		s.State("writing", nil)
		s.Delta("b ✓\nc")
		s.SetUsage(map[string]int{"prompt_tokens": 3})
		return nil
	})
	body := defaultBody()
	body["parent_run_id"] = "run_0"
	body["context"] = map[string]any{"user_id": "u9", "locale": "en"}
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	resp := invoke(t, context.Background(), srv, body, http.Header{"Traceparent": {tp}, "X-Custom": {"yes"}})
	evs := newSSEReader(resp.Body).events(t, false)

	want := []event{
		ev("state", map[string]any{"state": "thinking", "detail": map[string]any{"step": float64(1)}}),
		ev("delta", map[string]any{"text": "a"}),
		ev("state", map[string]any{"state": "writing", "detail": map[string]any{}}),
		ev("delta", map[string]any{"text": "b ✓\nc"}),
		ev("done", map[string]any{"usage": map[string]any{"prompt_tokens": float64(3)}}),
	}
	if !reflect.DeepEqual(evs, want) {
		t.Fatalf("events:\n got %+v\nwant %+v", evs, want)
	}
	if resp.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("Cache-Control = %q", resp.Header.Get("Cache-Control"))
	}

	wantReq := agentplane.Request{
		AgentID: "echo", SessionID: "ses_1", RunID: "run_1", ParentRunID: "run_0", UserID: "u9", Traceparent: tp,
		InputMessage: agentplane.Message{Role: "user", Content: "hi"},
		Messages:     []agentplane.Message{{Role: "user", Content: "hi"}},
		Context:      map[string]any{"user_id": "u9", "locale": "en"},
	}
	gotCopy := *got
	gotCopy.Header = nil
	if !reflect.DeepEqual(gotCopy, wantReq) {
		t.Errorf("request:\n got %+v\nwant %+v", gotCopy, wantReq)
	}
	if got.Header.Get("X-Custom") != "yes" {
		t.Errorf("Header not passed through: %v", got.Header)
	}
	if got.Client() != nil || got.OpenAIBaseURL() != "" {
		t.Errorf("no Platform configured, yet Client() = %+v", got.Client())
	}
}

func TestInvokeDoneWithoutOutput(t *testing.T) {
	srv := startAgent(t, func(context.Context, *agentplane.Request, agentplane.Stream) error { return nil })
	want := []event{ev("done", map[string]any{"usage": map[string]any{}})}
	if got := invokeEvents(t, srv, nil); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// The handler cannot write its second delta until the test has read the
// first off the wire: without a flush per event this times out.
func TestInvokeFlushesEachEvent(t *testing.T) {
	release := make(chan struct{})
	srv := startAgent(t, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		s.Delta("first")
		select {
		case <-release:
		case <-time.After(wait):
			return &agentplane.Error{Code: "test_timeout", Message: "first delta was not delivered before the second was written"}
		}
		return s.Delta("second")
	})
	r := newSSEReader(invoke(t, context.Background(), srv, nil, nil).Body)
	first, err := r.next()
	if err != nil || first.Name != "delta" || first.Data["text"] != "first" {
		t.Fatalf("first event = %+v, %v", first, err)
	}
	close(release)
	want := []event{ev("delta", map[string]any{"text": "second"}), ev("done", map[string]any{"usage": map[string]any{}})}
	if got := r.events(t, false); !reflect.DeepEqual(got, want) {
		t.Fatalf("rest = %+v, want %+v", got, want)
	}
}

func TestInvokeErrors(t *testing.T) {
	tests := []struct {
		name    string
		handler agentplane.HandlerFunc
		code    string
		message string // substring
	}{
		{
			name: "agent error after a delta",
			handler: func(_ context.Context, _ *agentplane.Request, s agentplane.Stream) error {
				s.Delta("partial")
				return &agentplane.Error{Code: "bad_input", Message: "no thanks"}
			},
			code: "bad_input", message: "no thanks",
		},
		{
			name: "wrapped agent error",
			handler: func(context.Context, *agentplane.Request, agentplane.Stream) error {
				return fmt.Errorf("calling the model: %w", &agentplane.Error{Code: "upstream_timeout", Message: "model too slow"})
			},
			code: "upstream_timeout", message: "model too slow",
		},
		{
			name: "unhandled tool call failure",
			handler: func(context.Context, *agentplane.Request, agentplane.Stream) error {
				return fmt.Errorf("paying: %w", &agentplane.ToolError{ToolName: "pay", ToolCallID: "tc_1", Code: "rejected", Message: "too much"})
			},
			code: "rejected", message: "too much",
		},
		{
			name: "plain error",
			handler: func(context.Context, *agentplane.Request, agentplane.Stream) error {
				return errors.New("boom")
			},
			code: agentplane.CodeAgentException, message: "boom",
		},
		{
			name: "panic",
			handler: func(context.Context, *agentplane.Request, agentplane.Stream) error {
				panic("kaput")
			},
			code: agentplane.CodeAgentException, message: "panic: kaput",
		},
		{
			name: "usage that is not JSON",
			handler: func(_ context.Context, _ *agentplane.Request, s agentplane.Stream) error {
				s.SetUsage(map[string]any{"f": func() {}})
				return nil
			},
			code: agentplane.CodeAgentException, message: "usage",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startAgent(t, tt.handler, func(a *agentplane.AgentHandler) { a.Logger = discardLogger() })
			evs := invokeEvents(t, srv, nil)
			last := evs[len(evs)-1]
			if last.Name != "error" || last.Data["code"] != tt.code || !strings.Contains(fmt.Sprint(last.Data["message"]), tt.message) {
				t.Fatalf("last event = %+v, want error %s containing %q", last, tt.code, tt.message)
			}
			for _, e := range evs[:len(evs)-1] {
				if e.Name == "done" || e.Name == "error" {
					t.Fatalf("more than one terminal event: %+v", evs)
				}
			}
		})
	}
}

func TestStateDetailMustBeJSON(t *testing.T) {
	errc := make(chan error, 1)
	srv := startAgent(t, func(_ context.Context, _ *agentplane.Request, s agentplane.Stream) error {
		errc <- s.State("x", make(chan int))
		return nil
	})
	if got := invokeEvents(t, srv, nil); len(got) != 1 || got[0].Name != "done" {
		t.Fatalf("events = %+v: the bad state must not be written", got)
	}
	if err := <-errc; err == nil {
		t.Fatal("State with an unencodable detail returned nil")
	}
}

func TestStreamClosedAfterHandlerReturns(t *testing.T) {
	leaked := make(chan agentplane.Stream, 1)
	srv := startAgent(t, func(_ context.Context, _ *agentplane.Request, s agentplane.Stream) error {
		leaked <- s
		return nil
	})
	invokeEvents(t, srv, nil)
	if err := (<-leaked).Delta("late"); !errors.Is(err, agentplane.ErrStreamClosed) {
		t.Fatalf("Delta after return = %v, want ErrStreamClosed", err)
	}
}

func TestConcurrentDeltas(t *testing.T) {
	const n = 20
	srv := startAgent(t, func(_ context.Context, _ *agentplane.Request, s agentplane.Stream) error {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Delta(fmt.Sprint(i))
			}()
		}
		wg.Wait()
		return nil
	})
	evs := invokeEvents(t, srv, nil)
	if len(evs) != n+1 || evs[n].Name != "done" {
		t.Fatalf("got %d events (%+v), want %d deltas then done", len(evs), evs, n)
	}
}

func TestInvokeCancelledWhenPlatformDisconnects(t *testing.T) {
	cancelled := make(chan error, 1)
	srv := startAgent(t, func(ctx context.Context, _ *agentplane.Request, s agentplane.Stream) error {
		s.Delta("first")
		select {
		case <-ctx.Done():
			cancelled <- ctx.Err()
			// A write after cancellation reports it instead of blocking.
			if err := s.Delta("late"); err == nil {
				cancelled <- errors.New("Delta after cancel returned nil")
			}
			return ctx.Err()
		case <-time.After(wait):
			cancelled <- errors.New("handler context was not cancelled")
			return nil
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	big := defaultBody()
	big["messages"] = []any{map[string]any{"role": "user", "content": strings.Repeat("x", 4<<20)}}
	r := newSSEReader(invoke(t, ctx, srv, big, nil).Body)
	if first, err := r.next(); err != nil || first.Data["text"] != "first" {
		t.Fatalf("first event = %+v, %v", first, err)
	}
	cancel() // the platform cancels the run: it drops the request
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler saw %v, want context.Canceled", err)
	}
	select {
	case err := <-cancelled:
		t.Fatal(err)
	case <-time.After(10 * time.Millisecond):
	}
}

func TestKeepAliveWhileSilent(t *testing.T) {
	srv := startAgent(t, func(_ context.Context, _ *agentplane.Request, s agentplane.Stream) error {
		s.Delta("a")
		time.Sleep(150 * time.Millisecond)
		return s.Delta("b")
	}, func(a *agentplane.AgentHandler) { a.KeepAlive = 20 * time.Millisecond })
	evs := newSSEReader(invoke(t, context.Background(), srv, nil, nil).Body).events(t, true)
	var names []string
	for _, e := range evs {
		if e.Comment != "" {
			if e.Comment != ": keep-alive" {
				t.Fatalf("unexpected comment %q", e.Comment)
			}
			if len(names) == 0 || names[len(names)-1] != "keep-alive" {
				names = append(names, "keep-alive")
			}
			continue
		}
		names = append(names, e.Name)
	}
	if want := []string{"delta", "keep-alive", "delta", "done"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("stream = %v, want %v", names, want)
	}
}

func TestNoKeepAliveWhenDisabled(t *testing.T) {
	srv := startAgent(t, func(_ context.Context, _ *agentplane.Request, s agentplane.Stream) error {
		time.Sleep(60 * time.Millisecond)
		return nil
	}, func(a *agentplane.AgentHandler) { a.KeepAlive = -1 })
	for _, e := range newSSEReader(invoke(t, context.Background(), srv, nil, nil).Body).events(t, true) {
		if e.Comment != "" {
			t.Fatalf("keep-alive sent although disabled")
		}
	}
}

func TestHealthAndBadRequests(t *testing.T) {
	srv := startAgent(t, func(context.Context, *agentplane.Request, agentplane.Stream) error { return nil },
		func(a *agentplane.AgentHandler) { a.MaxBodyBytes = 200 })
	c := srv.Client()

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(method, srv.URL+"/health", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s /health = %d", method, resp.StatusCode)
		}
	}

	resp, err := c.Get(srv.URL + "/invoke")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /invoke = %d, want 405", resp.StatusCode)
	}

	for _, tt := range []struct {
		body   string
		status int
		code   string
	}{
		{`{not json`, http.StatusBadRequest, "bad_request"},
		{`{"input_message": "not an object"}`, http.StatusBadRequest, "bad_request"},
		{`{"input_message": {"content": "` + strings.Repeat("x", 300) + `"}}`, http.StatusRequestEntityTooLarge, "payload_too_large"},
	} {
		resp, err := c.Post(srv.URL+"/invoke", "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Error struct{ Code, Message string }
		}
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != tt.status || got.Error.Code != tt.code {
			t.Errorf("POST %.20q: %d %+v, want %d %s", tt.body, resp.StatusCode, got, tt.status, tt.code)
		}
	}
}

func TestRequestClientIsBoundToTheRun(t *testing.T) {
	platform := newFakePlatform(t, map[string]func(recorded) reply{
		"POST /v1/sessions/ses_1/messages": okJSON(map[string]any{"message_id": "msg_1", "session_id": "ses_1", "run_id": "run_1", "role": "assistant", "content": "noted", "created_at": 1}),
	})
	type seen struct {
		baseURL, key string
		headers      map[string]string
		stored       *agentplane.StoredMessage
	}
	got := make(chan seen, 1)
	srv := startAgent(t, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		m, err := req.Client().AppendMessage(ctx, "", agentplane.Message{Role: "assistant", Content: "noted"})
		if err != nil {
			return err
		}
		got <- seen{req.OpenAIBaseURL(), req.OpenAIAPIKey(), req.OpenAIHeaders(), m}
		return nil
	}, func(a *agentplane.AgentHandler) {
		a.Platform = &agentplane.Client{BaseURL: platform.URL + "/", APIKey: "ak_1"}
	})
	if evs := invokeEvents(t, srv, nil); evs[len(evs)-1].Name != "done" {
		t.Fatalf("events = %+v", evs)
	}
	s := <-got
	rec := platform.last(t)
	if rec.Header.Get("Authorization") != "Bearer ak_1" || rec.Header.Get("x-run-id") != "run_1" || rec.Header.Get("x-session-id") != "ses_1" {
		t.Errorf("platform call headers = %v", rec.Header)
	}
	if !reflect.DeepEqual(rec.Body, map[string]any{"role": "assistant", "content": "noted"}) {
		t.Errorf("body = %v", rec.Body)
	}
	if s.stored.MessageID != "msg_1" {
		t.Errorf("stored = %+v", s.stored)
	}
	if s.baseURL != platform.URL+"/v1" || s.key != "ak_1" || !reflect.DeepEqual(s.headers, map[string]string{"x-run-id": "run_1", "x-session-id": "ses_1"}) {
		t.Errorf("OpenAI config = %q %q %v", s.baseURL, s.key, s.headers)
	}
}

func TestNewAgentHandlerReadsEnv(t *testing.T) {
	t.Setenv(agentplane.EnvURL, "http://platform.example:8080")
	t.Setenv(agentplane.EnvAgentKey, "ak_env")
	a := agentplane.NewAgentHandler(nil)
	if a.Platform == nil || a.Platform.BaseURL != "http://platform.example:8080" || a.Platform.APIKey != "ak_env" {
		t.Fatalf("Platform = %+v", a.Platform)
	}
	t.Setenv(agentplane.EnvURL, "")
	if a := agentplane.NewAgentHandler(nil); a.Platform != nil {
		t.Fatalf("Platform = %+v with %s unset, want nil", a.Platform, agentplane.EnvURL)
	}
}

// TestNewAgentHandlerNeedsURLAndKey: with AGENTPLANE_URL set and no
// AGENTPLANE_AGENT_KEY, req.Client() is nil and its methods say what to set
// (ErrNotConfigured, as doc.go promises) instead of failing with the
// platform's 401; the same with only the key.
func TestNewAgentHandlerNeedsURLAndKey(t *testing.T) {
	platform := newFakePlatform(t, nil)
	for _, env := range []struct{ url, key string }{{platform.URL, ""}, {"", "ak_env"}} {
		t.Setenv(agentplane.EnvURL, env.url)
		t.Setenv(agentplane.EnvAgentKey, env.key)
		ah := agentplane.NewAgentHandler(func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
			if c := req.Client(); c != nil {
				t.Errorf("%s=%q %s=%q: Client() = %+v, want nil", agentplane.EnvURL, env.url, agentplane.EnvAgentKey, env.key, c)
			}
			return req.Client().Heartbeat(ctx, "echo")
		})
		ah.Logger = discardLogger()
		if ah.Platform != nil {
			t.Errorf("%s=%q %s=%q: Platform = %+v, want nil", agentplane.EnvURL, env.url, agentplane.EnvAgentKey, env.key, ah.Platform)
		}
		srv := httptest.NewServer(ah)
		evs := invokeEvents(t, srv, nil)
		srv.Close()
		last := evs[len(evs)-1]
		if msg, _ := last.Data["message"].(string); last.Name != "error" || !strings.Contains(msg, agentplane.EnvAgentKey) {
			t.Errorf("%s=%q %s=%q: last event %+v, want the ErrNotConfigured error", agentplane.EnvURL, env.url, agentplane.EnvAgentKey, env.key, last)
		}
	}
	if n := platform.count(); n != 0 {
		t.Errorf("the platform got %d requests, want none without a key", n)
	}
}

func TestServeListenerStopsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agentplane.ServeListener(ctx, ln, &agentplane.AgentHandler{Handler: func(context.Context, *agentplane.Request, agentplane.Stream) error { return nil }})
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeListener = %v, want nil after cancel", err)
		}
	case <-time.After(wait):
		t.Fatal("ServeListener did not return after cancel")
	}
}

func TestServeBadAddress(t *testing.T) {
	if err := agentplane.Serve(context.Background(), "256.0.0.1:bad", nil); err == nil {
		t.Fatal("Serve on a bad address returned nil")
	}
}

// TestInputRequired: Stream.InputRequired ends the turn with
// `event: input_required` (and nothing after it, whatever the handler
// returns); the request carries intention_id and resumes_run_id.
func TestInputRequired(t *testing.T) {
	var got *agentplane.Request
	var after error
	srv := startAgent(t, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		got = req
		if err := s.InputRequired("", nil); err == nil {
			t.Error("an empty question was sent")
		}
		s.Delta("Let me see.")
		if err := s.InputRequired("Which city?", map[string]any{"choices": []string{"Paris"}}); err != nil {
			return err
		}
		after = s.Delta("too late")
		return errors.New("ignored")
	})
	body := defaultBody()
	body["intention_id"] = "int_1"
	body["resumes_run_id"] = "run_0"
	resp := invoke(t, context.Background(), srv, body, nil)
	evs := newSSEReader(resp.Body).events(t, false)
	want := []event{
		ev("delta", map[string]any{"text": "Let me see."}),
		ev("input_required", map[string]any{"question": "Which city?", "detail": map[string]any{"choices": []any{"Paris"}}}),
	}
	if !reflect.DeepEqual(evs, want) {
		t.Fatalf("events:\n got %+v\nwant %+v", evs, want)
	}
	if !errors.Is(after, agentplane.ErrStreamClosed) {
		t.Errorf("a delta after input_required: %v, want ErrStreamClosed", after)
	}
	if got.IntentionID != "int_1" || got.ResumesRunID != "run_0" {
		t.Errorf("request %+v", got)
	}
}

// The traceparent an agent is invoked with goes on with its calls of the
// platform and its LLM calls, so the platform's spans join the run's trace.
func TestRequestClientPropagatesTraceparent(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	platform := newFakePlatform(t, map[string]func(recorded) reply{
		"POST /v1/sessions/ses_1/messages": okJSON(map[string]any{"message_id": "msg_1", "session_id": "ses_1", "run_id": "run_1", "role": "assistant", "content": "noted", "created_at": 1}),
	})
	headers := make(chan map[string]string, 1)
	srv := startAgent(t, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		if _, err := req.Client().AppendMessage(ctx, "", agentplane.Message{Role: "assistant", Content: "noted"}); err != nil {
			return err
		}
		headers <- req.OpenAIHeaders()
		return nil
	}, func(a *agentplane.AgentHandler) {
		a.Platform = &agentplane.Client{BaseURL: platform.URL, APIKey: "ak_1"}
	})
	resp := invoke(t, context.Background(), srv, nil, http.Header{"Traceparent": {tp}})
	if evs := newSSEReader(resp.Body).events(t, false); evs[len(evs)-1].Name != "done" {
		t.Fatalf("events = %+v", evs)
	}
	if got := platform.last(t).Header.Get("traceparent"); got != tp {
		t.Errorf("platform call traceparent = %q, want %q", got, tp)
	}
	if h := <-headers; h["traceparent"] != tp || h["x-run-id"] != "run_1" {
		t.Errorf("OpenAIHeaders = %v", h)
	}
	// An agent with its own spans sends its span's context instead.
	own := "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
	if c := (&agentplane.Client{}).WithTraceparent(own); c.OpenAIHeaders()["traceparent"] != own {
		t.Errorf("WithTraceparent: %v", c.OpenAIHeaders())
	}
}
