package llmproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/llmproxy"
)

// checkDone checks an llm_call_done against the usage the upstream reported
// and the price table.
func checkDone(t *testing.T, d llmproxy.CallDone, usage map[string]any, price llmproxy.Price) {
	t.Helper()
	prompt, completion := num(usage, "prompt_tokens")+num(usage, "input_tokens"), num(usage, "completion_tokens")+num(usage, "output_tokens")
	cached := num(usage, "prompt_tokens_details", "cached_tokens") + num(usage, "input_tokens_details", "cached_tokens")
	reasoning := num(usage, "completion_tokens_details", "reasoning_tokens") + num(usage, "output_tokens_details", "reasoning_tokens")
	if prompt == 0 {
		t.Fatalf("upstream usage %v has no prompt tokens", usage)
	}
	got := [5]int64{d.PromptTokens, d.CompletionTokens, d.CachedTokens, d.ReasoningTokens, d.TotalTokens}
	want := [5]int64{prompt, completion, cached, reasoning, num(usage, "total_tokens")}
	if got != want {
		t.Errorf("recorded tokens (prompt, completion, cached, reasoning, total) = %v, upstream reported %v", got, want)
	}
	cost := (float64(prompt-cached)*price.Input + float64(cached)*price.CachedInput + float64(completion)*price.Output) / 1e6
	if math.Abs(d.EstimatedCost-cost) > 1e-9 {
		t.Errorf("estimated_cost = %v, want %v", d.EstimatedCost, cost)
	}
	if d.Price == nil || *d.Price != price {
		t.Errorf("price = %+v, want %+v", d.Price, price)
	}
	if d.Partial {
		t.Error("complete call recorded as partial")
	}
	if d.Outcome != llmproxy.OutcomeOK || d.Status != 200 || d.Attempts != 1 {
		t.Errorf("outcome/status/attempts = %s/%d/%d, want ok/200/1", d.Outcome, d.Status, d.Attempts)
	}
	if d.LatencyMS <= 0 || d.TTFTMS <= 0 || d.TTFTMS > d.LatencyMS {
		t.Errorf("latency_ms %v, ttft_ms %v", d.LatencyMS, d.TTFTMS)
	}
}

var fakePrice = llmproxy.Price{Input: 2.5, CachedInput: 1.25, Output: 10}

func TestChatCompletionNonStreaming(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	var w wire
	client := e.client(t, &w)

	resp, err := client.Chat.Completions.New(context.Background(), userMessage("hello proxy"))
	if err != nil {
		t.Fatalf("chat completion: %v", err)
	}
	if got, want := resp.Choices[0].Message.Content, fakellm.Reply("hello proxy"); got != want {
		t.Errorf("content = %q, want %q", got, want)
	}
	got := up.lastRequest(t)
	// Both bodies pass through unchanged.
	if !bytes.Equal(got.Body, w.reqBody) {
		t.Errorf("upstream got body\n%s\nclient sent\n%s", got.Body, w.reqBody)
	}
	if !bytes.Equal(w.body(), got.Response) {
		t.Errorf("client got\n%s\nupstream sent\n%s", w.body(), got.Response)
	}
	// The agent's key and attribution headers stay here; the upstream key goes there.
	if a := got.Header.Get("Authorization"); a != "Bearer "+upstreamKey {
		t.Errorf("upstream Authorization = %q", a)
	}
	for _, h := range []string{"X-Run-Id", "X-Session-Id"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("upstream got %s: %s", h, v)
		}
	}
	if ae := got.Header.Get("Accept-Encoding"); ae != "identity" {
		t.Errorf("upstream Accept-Encoding = %q, want identity", ae)
	}

	d := e.rec.waitDone(t)
	checkDone(t, d, usageOf(t, got.Response), fakePrice)
	if d.Endpoint != "chat.completions" || d.Stream || d.Model != "fake-gpt" || d.Upstream != "default" {
		t.Errorf("done = %+v", d)
	}
	// A call that ends before StartedEventAfter is recorded by its done
	// event alone, which says when it started.
	evs := e.rec.all()
	if len(evs) != 1 || evs[0].Type != llmproxy.EventCallDone {
		t.Fatalf("events = %+v, want llm_call_done alone", evs)
	}
	if now := time.Now().UnixMilli(); d.StartedAt <= 0 || d.StartedAt > now || now-d.StartedAt > 60_000 {
		t.Errorf("started_at = %d (now %d)", d.StartedAt, now)
	}
	want := llmproxy.Caller{AgentID: "agent-1", RunID: "run-1", SessionID: "sess-1"}
	if evs[0].Caller != want {
		t.Errorf("caller = %+v", evs[0].Caller)
	}
	// The payload is what the event log stores: it must marshal with the agreed names.
	b, _ := json.Marshal(d)
	for _, k := range []string{`"call_id"`, `"prompt_tokens"`, `"cached_tokens"`, `"reasoning_tokens"`, `"estimated_cost"`, `"price":{"input"`, `"partial":false`, `"started_at"`, `"ttft_ms"`, `"latency_ms"`, `"outcome":"ok"`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("payload %s lacks %s", b, k)
		}
	}
}

func TestChatCompletionStreamingStripsInjectedUsage(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	var w wire
	client := e.client(t, &w)

	stream := client.Chat.Completions.NewStreaming(context.Background(), userMessage("stream me please"))
	var text strings.Builder
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) == 0 {
			t.Errorf("client got a chunk without choices (the injected usage chunk): %s", ch.RawJSON())
			continue
		}
		text.WriteString(ch.Choices[0].Delta.Content)
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if got, want := text.String(), fakellm.Reply("stream me please"); got != want {
		t.Errorf("streamed text = %q, want %q", got, want)
	}
	if v := w.respHead.Get("X-Accel-Buffering"); v != "no" {
		t.Errorf("X-Accel-Buffering = %q", v)
	}
	got := up.lastRequest(t)
	var sent map[string]any
	_ = json.Unmarshal(got.Body, &sent)
	if so, _ := sent["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("upstream request lacks include_usage: %s", got.Body)
	}
	// The client gets every upstream event but the usage chunk, byte for byte.
	upEvents := sseEvents(got.Response)
	var want []string
	var usageChunks int
	for _, ev := range upEvents {
		if strings.Contains(ev, `"choices":[]`) {
			usageChunks++
			continue
		}
		want = append(want, ev)
	}
	if usageChunks != 1 {
		t.Fatalf("upstream sent %d usage chunks, want 1", usageChunks)
	}
	if gotEvents := sseEvents(w.body()); strings.Join(gotEvents, "") != strings.Join(want, "") {
		t.Errorf("client events:\n%s\nwant:\n%s", strings.Join(gotEvents, ""), strings.Join(want, ""))
	}
	d := e.rec.waitDone(t)
	checkDone(t, d, usageOf(t, got.Response), fakePrice)
	if !d.Stream || d.Chunks != len(upEvents) {
		t.Errorf("stream %v chunks %d, want true %d", d.Stream, d.Chunks, len(upEvents))
	}
}

func TestChatCompletionStreamingClientAskedForUsage(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	var w wire
	client := e.client(t, &w)

	params := userMessage("count my tokens")
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	var usage openai.CompletionUsage
	for stream.Next() {
		if ch := stream.Current(); ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	got := up.lastRequest(t)
	if !bytes.Equal(got.Body, w.reqBody) {
		t.Errorf("request the client already metered was rewritten:\n%s\n%s", got.Body, w.reqBody)
	}
	if !bytes.Equal(w.body(), got.Response) {
		t.Errorf("client got\n%s\nupstream sent\n%s", w.body(), got.Response)
	}
	d := e.rec.waitDone(t)
	checkDone(t, d, usageOf(t, got.Response), fakePrice)
	if usage.TotalTokens != d.TotalTokens {
		t.Errorf("client saw %d tokens, recorded %d", usage.TotalTokens, d.TotalTokens)
	}
}

func weatherTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:        "get_weather",
		Description: openai.String("Weather in a city"),
		Parameters: shared.FunctionParameters{
			"type":       "object",
			"properties": map[string]any{"input": map[string]any{"type": "string"}},
		},
	})
}

func TestToolCall(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))

	t.Run("non-streaming", func(t *testing.T) {
		var w wire
		client := e.client(t, &w)
		params := userMessage("weather in Paris")
		params.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
		resp, err := client.Chat.Completions.New(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		tc := resp.Choices[0].Message.ToolCalls
		if len(tc) != 1 || tc[0].Function.Name != "get_weather" || tc[0].Function.Arguments != fakellm.ToolArguments("weather in Paris") {
			t.Fatalf("tool calls = %+v", tc)
		}
		got := up.lastRequest(t)
		if !bytes.Equal(w.body(), got.Response) || !bytes.Equal(got.Body, w.reqBody) {
			t.Error("tool-call exchange was altered")
		}
		checkDone(t, e.rec.waitDone(t), usageOf(t, got.Response), fakePrice)
	})

	t.Run("streaming", func(t *testing.T) {
		var w wire
		client := e.client(t, &w)
		params := userMessage("weather in Oslo")
		params.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
		stream := client.Chat.Completions.NewStreaming(context.Background(), params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		tc := acc.Choices[0].Message.ToolCalls
		if len(tc) != 1 || tc[0].Function.Name != "get_weather" || tc[0].Function.Arguments != fakellm.ToolArguments("weather in Oslo") {
			t.Fatalf("accumulated tool calls = %+v", tc)
		}
		if acc.Choices[0].FinishReason != "tool_calls" {
			t.Errorf("finish_reason = %q", acc.Choices[0].FinishReason)
		}
		got := up.lastRequest(t)
		checkDone(t, e.rec.waitDone(t), usageOf(t, got.Response), fakePrice)
	})

	t.Run("tool result", func(t *testing.T) {
		client := e.client(t, nil)
		params := openai.ChatCompletionNewParams{Model: "fake-gpt", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage("weather in Rome"),
			openai.ToolMessage("sunny, 24C", "call_1"),
		}}
		resp, err := client.Chat.Completions.New(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Message.Content; got != fakellm.ToolReply("sunny, 24C") {
			t.Errorf("content = %q", got)
		}
		e.rec.waitDone(t)
	})
}

func TestResponsesAPI(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))

	t.Run("non-streaming", func(t *testing.T) {
		var w wire
		client := e.client(t, &w)
		resp, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
			Model: "fake-gpt",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello responses")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.OutputText(); got != fakellm.Reply("hello responses") {
			t.Errorf("output text = %q", got)
		}
		got := up.lastRequest(t)
		if !bytes.Equal(w.body(), got.Response) || !bytes.Equal(got.Body, w.reqBody) {
			t.Error("responses exchange was altered")
		}
		d := e.rec.waitDone(t)
		checkDone(t, d, usageOf(t, got.Response), fakePrice)
		if d.Endpoint != "responses" {
			t.Errorf("endpoint = %q", d.Endpoint)
		}
	})

	t.Run("streaming", func(t *testing.T) {
		var w wire
		client := e.client(t, &w)
		stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
			Model: "fake-gpt",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream responses")},
		})
		var text strings.Builder
		var types []string
		var completed responses.Response
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			if ev.Type == "response.output_text.delta" {
				text.WriteString(ev.Delta)
			}
			if ev.Type == "response.completed" {
				completed = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != fakellm.Reply("stream responses") {
			t.Errorf("deltas = %q", text.String())
		}
		if types[0] != "response.created" || types[len(types)-1] != "response.completed" {
			t.Errorf("event types = %v", types)
		}
		got := up.lastRequest(t)
		// Nothing to inject for the Responses API: both directions unchanged.
		if !bytes.Equal(got.Body, w.reqBody) || !bytes.Equal(w.body(), got.Response) {
			t.Error("responses stream was altered")
		}
		d := e.rec.waitDone(t)
		checkDone(t, d, usageOf(t, got.Response), fakePrice)
		if completed.Usage.InputTokens != d.PromptTokens {
			t.Errorf("client saw %d input tokens, recorded %d", completed.Usage.InputTokens, d.PromptTokens)
		}
	})

	t.Run("function call", func(t *testing.T) {
		client := e.client(t, nil)
		resp, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
			Model: "fake-gpt",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("look it up")},
			Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("lookup", map[string]any{"type": "object"}, false)},
		})
		if err != nil {
			t.Fatal(err)
		}
		fc := resp.Output[0].AsFunctionCall()
		if fc.Name != "lookup" || fc.Arguments != fakellm.ToolArguments("look it up") {
			t.Errorf("function call = %+v", resp.Output[0].RawJSON())
		}
		e.rec.waitDone(t)
	})
}

func TestEmbeddings(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	cfg := singleUpstream(up)
	cfg.Prices["fake-embed"] = llmproxy.Price{Input: 0.02}
	e := newEnv(t, cfg)
	var w wire
	client := e.client(t, &w)
	resp, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model: "fake-embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"one two", "three"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 2 || len(resp.Data[0].Embedding) != 8 {
		t.Fatalf("embeddings = %d × %d", len(resp.Data), len(resp.Data[0].Embedding))
	}
	got := up.lastRequest(t)
	if !bytes.Equal(w.body(), got.Response) || !bytes.Equal(got.Body, w.reqBody) {
		t.Error("embeddings exchange was altered")
	}
	d := e.rec.waitDone(t)
	if d.Endpoint != "embeddings" || d.PromptTokens != 3 || d.TotalTokens != 3 || d.CompletionTokens != 0 {
		t.Errorf("done = %+v", d)
	}
	if want := 3 * 0.02 / 1e6; math.Abs(d.EstimatedCost-want) > 1e-12 {
		t.Errorf("cost = %v, want %v", d.EstimatedCost, want)
	}
}

func TestModels(t *testing.T) {
	up := newUpstream(t, fakellm.Options{Models: []string{"fake-gpt", "fake-embed"}})
	e := newEnv(t, singleUpstream(up))
	var w wire
	client := e.client(t, &w)
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "fake-gpt,fake-embed" {
		t.Errorf("models = %v", ids)
	}
	if got := up.lastRequest(t); !bytes.Equal(w.body(), got.Response) {
		t.Error("models list was altered")
	}
	if n := len(e.rec.all()); n != 0 {
		t.Errorf("listing models recorded %d events", n)
	}
}

func TestAcceptEncodingIsIdentityUpstream(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	body := []byte(`{"model":"fake-gpt","stream":true,"messages":[{"role":"user","content":"zip it"}]}`)
	resp, got := e.post(t, "/v1/chat/completions", agentKey, body, map[string]string{"Accept-Encoding": "gzip, br"})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("status %d, Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
	if !strings.Contains(string(got), "data: [DONE]") {
		t.Errorf("stream = %q", got)
	}
	if ae := up.lastRequest(t).Header.Get("Accept-Encoding"); ae != "identity" {
		t.Errorf("upstream Accept-Encoding = %q", ae)
	}
	if d := e.rec.waitDone(t); d.TotalTokens == 0 {
		t.Error("stream was not metered")
	}
}

// A call still running after StartedEventAfter gets its llm_call_started
// then, before its done; a negative StartedEventAfter records it at once.
func TestCallStartedRecordedForLongCalls(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
		delay time.Duration
	}{
		{"long call", 30 * time.Millisecond, 20 * time.Millisecond}, // 14 chunks × 20 ms
		{"always", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, fakellm.Options{ChunkDelay: tc.delay})
			cfg := singleUpstream(up)
			cfg.StartedEventAfter = tc.after
			e := newEnv(t, cfg)
			var w wire
			client := e.client(t, &w)
			stream := client.Chat.Completions.NewStreaming(context.Background(), userMessage("a slow answer"))
			for stream.Next() {
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			d := e.rec.waitDone(t)
			evs := e.rec.all()
			if len(evs) != 2 || evs[0].Type != llmproxy.EventCallStarted || evs[1].Type != llmproxy.EventCallDone {
				t.Fatalf("events = %+v, want llm_call_started then llm_call_done", evs)
			}
			st := evs[0].Payload.(llmproxy.CallStarted)
			if st.CallID != d.CallID || st.Model != "fake-gpt" || st.Endpoint != "chat.completions" || !st.Stream {
				t.Errorf("started = %+v, done call_id %s", st, d.CallID)
			}
			want := llmproxy.Caller{AgentID: "agent-1", RunID: "run-1", SessionID: "sess-1"}
			if evs[0].Caller != want || evs[1].Caller != want {
				t.Errorf("callers = %+v, %+v", evs[0].Caller, evs[1].Caller)
			}
		})
	}
}

// A call whose request carries no traceparent joins the trace the
// authenticator names (the run's agent invoke span): the upstream is sent
// a child of it. A request's own traceparent is left to the server's
// middleware, so the caller's is not used for it.
func TestCallSpanJoinsTheRunsTraceWithoutATraceparent(t *testing.T) {
	const runTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	up := newUpstream(t, fakellm.Options{})
	e := newEnvAuth(t, singleUpstream(up), func(r *http.Request) (llmproxy.Caller, error) {
		c, err := testAuth(r)
		c.Traceparent = runTP
		return c, err
	})
	body := []byte(`{"model":"fake-gpt","messages":[{"role":"user","content":"trace me"}]}`)
	resp, _ := e.post(t, "/v1/chat/completions", agentKey, body, map[string]string{"X-Run-Id": "run-1"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := up.lastRequest(t).Header.Get("traceparent")
	parts := strings.Split(got, "-")
	if len(parts) != 4 || parts[1] != "4bf92f3577b34da6a3ce929d0e0e4736" || parts[2] == "00f067aa0ba902b7" {
		t.Fatalf("upstream traceparent %q: want the run's trace id with a span of the call's own", got)
	}
}

// No spelling of a platform key reaches the upstream: whatever header an
// agent put its key in (Authorization, api-key, x-api-key, x-admin-key),
// the upstream gets its own key and nothing else of the caller's.
func TestCallerKeysNeverReachTheUpstream(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	for _, h := range []string{"Api-Key", "X-Api-Key", "X-Admin-Key"} {
		resp, body := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "x", false), map[string]string{h: agentKey})
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", h, resp.StatusCode, body)
		}
		got := up.lastRequest(t)
		for k, vs := range got.Header {
			for _, v := range vs {
				if strings.Contains(v, agentKey) {
					t.Errorf("sent with %s: the upstream got the agent's key in %s", h, k)
				}
			}
		}
	}
}
