package llmproxy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/llmproxy"
)

// scriptedUpstream is an upstream that answers every request with the SSE
// events given, flushing each, then ends its response cleanly: the wire
// format of streams fakellm does not write (errors inside a stream, a
// stream without its last event, usage beside choices). It keeps the
// request bodies it got.
type scriptedUpstream struct {
	srv    *httptest.Server
	bodies chan []byte
}

func newScriptedUpstream(t *testing.T, events []string) *scriptedUpstream {
	t.Helper()
	u := &scriptedUpstream{bodies: make(chan []byte, 16)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.bodies <- b
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		for _, ev := range events {
			if _, err := io.WriteString(w, ev); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *scriptedUpstream) config() llmproxy.Config {
	return llmproxy.ConfigFromEnv(u.srv.URL+"/v1", upstreamKey)
}

// Chat Completions chunks as OpenAI writes them with include_usage on.
const chunkHead = `data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_1",`

func chatChunk(content string) string {
	return chunkHead + `"choices":[{"index":0,"delta":{"content":"` + content + `"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"
}

var (
	roleChunk   = chunkHead + `"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"
	finishChunk = chunkHead + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n"
	usageChunk  = chunkHead + `"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}` + "\n\n"
	doneEvent   = "data: [DONE]\n\n"
)

// Responses API events as OpenAI writes them, with their "event:" lines.
func responsesEvent(typ, data string) string {
	return "event: " + typ + "\ndata: " + data + "\n\n"
}

var (
	respCreated = responsesEvent("response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1700000000,"status":"in_progress","error":null,"incomplete_details":null,"model":"gpt-4o","output":[],"usage":null}}`)
	respDelta   = responsesEvent("response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel"}`)
)

// A stream that fails or is cut off upstream is recorded as the error it
// is, while the client gets exactly the bytes the upstream sent: an error
// event inside a chat stream (OpenAI's shape, and a router's beside its
// choices), a chat stream ending without [DONE] and without the usage
// chunk that comes only after the generation ended, a Responses stream
// ending in response.failed or an error event, or without its terminal
// event. Text that merely mentions "error", and streams that did end,
// stay ok.
func TestStreamEndingInAnErrorIsRecordedAsOne(t *testing.T) {
	routerError := chunkHead + `"provider":"openai","error":{"code":502,"message":"Provider disconnected unexpectedly"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}` + "\n\n"
	openAIError := `data: {"error":{"message":"overloaded mid-stream","type":"server_error"}}` + "\n\n"
	vllmError := `data: {"object":"error","message":"This model's maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}` + "\n\n"
	cases := []struct {
		name     string
		path     string
		events   []string
		client   string // what the client gets when it is not what the upstream sent
		outcome  string
		code     string
		message  string // a part of the recorded message
		partial  bool
		tokens   int64
		complete bool
	}{
		{name: "chat error event, then the end", path: "/v1/chat/completions",
			events:  []string{roleChunk, chatChunk("Hel"), openAIError},
			outcome: "error", code: "server_error", message: "overloaded mid-stream", partial: true},
		{name: "chat error event, then [DONE]", path: "/v1/chat/completions",
			events:  []string{roleChunk, chatChunk("Hel"), openAIError, doneEvent},
			outcome: "error", code: "server_error", message: "overloaded mid-stream", partial: true},
		{name: "chat error beside choices (a router's)", path: "/v1/chat/completions",
			events:  []string{roleChunk, chatChunk("Hel"), routerError, doneEvent},
			outcome: "error", code: "502", message: "Provider disconnected unexpectedly", partial: true},
		{name: "vLLM's error object, then [DONE]", path: "/v1/chat/completions",
			events:  []string{roleChunk, chatChunk("Hel"), vllmError, doneEvent},
			outcome: "error", code: "400", message: "maximum context length", partial: true},
		{name: "chat without [DONE]", path: "/v1/chat/completions",
			events:  []string{roleChunk, chatChunk("Hel")},
			outcome: "error", code: "upstream_protocol_error", message: "[DONE]", partial: true},
		{name: "chat finished but cut before its usage chunk and [DONE]", path: "/v1/chat/completions",
			events:  []string{roleChunk, chatChunk("Hel"), finishChunk},
			outcome: "error", code: "upstream_protocol_error", message: "[DONE]", partial: true},
		{name: "chat with its usage chunk but no [DONE]", path: "/v1/chat/completions",
			events: []string{roleChunk, chatChunk("Hel"), finishChunk, usageChunk},
			client: roleChunk + chatChunk("Hel") + finishChunk, outcome: "ok", tokens: 12},
		{name: "chat text about an error", path: "/v1/chat/completions",
			events: []string{roleChunk, chatChunk(`the \"error\": {\"message\": \"x\"} key`), finishChunk, usageChunk, doneEvent},
			client: roleChunk + chatChunk(`the \"error\": {\"message\": \"x\"} key`) + finishChunk + doneEvent, outcome: "ok", tokens: 12},
		{name: "responses failed", path: "/v1/responses",
			events: []string{respCreated, respDelta, responsesEvent("response.failed",
				`{"type":"response.failed","sequence_number":2,"response":{"id":"resp_1","object":"response","created_at":1700000000,"status":"failed","error":{"code":"server_error","message":"The model crashed"},"incomplete_details":null,"model":"gpt-4o","output":[],"usage":null}}`)},
			outcome: "error", code: "server_error", message: "The model crashed", partial: true},
		{name: "responses error event", path: "/v1/responses",
			events: []string{respCreated, respDelta, responsesEvent("error",
				`{"type":"error","sequence_number":2,"code":"rate_limit_exceeded","message":"Too many tokens in flight","param":null}`)},
			outcome: "error", code: "rate_limit_exceeded", message: "Too many tokens in flight", partial: true},
		{name: "responses cut before its terminal event", path: "/v1/responses",
			events:  []string{respCreated, respDelta},
			outcome: "error", code: "upstream_protocol_error", message: "response.completed", partial: true},
		{name: "responses incomplete", path: "/v1/responses",
			events: []string{respCreated, respDelta, responsesEvent("response.incomplete",
				`{"type":"response.incomplete","sequence_number":2,"response":{"id":"resp_1","object":"response","created_at":1700000000,"status":"incomplete","error":null,"incomplete_details":{"reason":"max_output_tokens"},"model":"gpt-4o","output":[],"usage":{"input_tokens":9,"output_tokens":3,"total_tokens":12}}}`)},
			outcome: "ok", tokens: 12},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newScriptedUpstream(t, tc.events)
			e := newEnv(t, up.config())
			resp, got := e.post(t, tc.path, agentKey, chatBody("fake-gpt", "hi", true), nil)
			want := tc.client
			if want == "" {
				want = strings.Join(tc.events, "")
			}
			if resp.StatusCode != http.StatusOK || string(got) != want {
				t.Errorf("client got %d\n%s\nwant 200\n%s", resp.StatusCode, got, want)
			}
			d := e.rec.waitDone(t)
			if d.Outcome != tc.outcome || d.Status != http.StatusOK || d.Partial != tc.partial || d.TotalTokens != tc.tokens || d.Chunks != len(tc.events) {
				t.Errorf("done = %+v, want outcome %s, status 200, partial %v, %d tokens, %d chunks", d, tc.outcome, tc.partial, tc.tokens, len(tc.events))
			}
			switch {
			case tc.code == "" && d.Error != nil:
				t.Errorf("error = %+v, want none", d.Error)
			case tc.code != "" && (d.Error == nil || d.Error.Code != tc.code || !strings.Contains(d.Error.Message, tc.message)):
				t.Errorf("error = %+v, want code %s and a message with %q", d.Error, tc.code, tc.message)
			}
		})
	}
}

// Some OpenAI-compatible routers send the usage the proxy asked for on the
// client's behalf inside the last chunk that still has choices. The client
// that did not ask for usage does not get it: that chunk reaches it without
// its usage member, otherwise byte for byte; the call is metered from it. A
// client that asked gets the chunk as it was sent.
func TestInjectedUsageRemovedFromAChunkWithChoices(t *testing.T) {
	const usage = `{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":4}}`
	cases := []struct {
		name, last, stripped string
	}{
		{"usage last",
			chunkHead + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":` + usage + "}\n\n",
			chunkHead + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n"},
		{"usage first, spaced, CRLF",
			`data: { "usage" : ` + usage + ` , "id":"chatcmpl-9","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]}` + "\r\n\r\n",
			`data: { "id":"chatcmpl-9","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]}` + "\r\n\r\n"},
		{"usage between members",
			chunkHead + `"usage" :` + usage + `, "choices":[{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\n",
			chunkHead[:len(chunkHead)-1] + `, "choices":[{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			events := []string{roleChunk, chatChunk("Hi"), tc.last, doneEvent}
			up := newScriptedUpstream(t, events)
			e := newEnv(t, up.config())

			resp, got := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "hi", true), nil)
			if sent := <-up.bodies; !strings.Contains(string(sent), `"include_usage":true`) {
				t.Fatalf("the proxy did not ask for usage upstream: %s", sent)
			}
			want := roleChunk + chatChunk("Hi") + tc.stripped + doneEvent
			if resp.StatusCode != http.StatusOK || string(got) != want {
				t.Errorf("client got %d\n%q\nwant\n%q", resp.StatusCode, got, want)
			}
			for _, line := range strings.Split(string(got), "\n") {
				data, ok := strings.CutPrefix(strings.TrimSpace(line), "data:")
				if ok && strings.TrimSpace(data) != "[DONE]" && !json.Valid([]byte(data)) {
					t.Errorf("client got an event that is not JSON: %q", line)
				}
			}
			d := e.rec.waitDone(t)
			if d.Outcome != "ok" || d.Partial || d.PromptTokens != 9 || d.CompletionTokens != 3 || d.CachedTokens != 4 || d.TotalTokens != 12 {
				t.Errorf("done = %+v", d)
			}

			// The client asked: nothing is removed.
			body := `{"model":"fake-gpt","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			resp, got = e.post(t, "/v1/chat/completions", agentKey, []byte(body), nil)
			<-up.bodies
			if resp.StatusCode != http.StatusOK || string(got) != strings.Join(events, "") {
				t.Errorf("client that asked for usage got %d\n%q\nwant\n%q", resp.StatusCode, got, strings.Join(events, ""))
			}
			if d := e.rec.waitDone(t); d.Outcome != "ok" || d.TotalTokens != 12 {
				t.Errorf("done = %+v", d)
			}
		})
	}
}
