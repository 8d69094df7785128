package fakellm_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentplane/agentplane/internal/fakellm"
)

func start(t *testing.T, opts fakellm.Options) (*fakellm.Running, openai.Client) {
	t.Helper()
	r, err := fakellm.Start("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	c := openai.NewClient(option.WithBaseURL(r.URL+"/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	return r, c
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The fake must look like OpenAI to the official SDK, since the proxy's
// tests trust it to.
func TestWireFormatWithOpenAISDK(t *testing.T) {
	_, client := start(t, fakellm.Options{})
	ctx := context.Background()
	msg := openai.ChatCompletionNewParams{Model: "fake-gpt", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi there")}}

	cc, err := client.Chat.Completions.New(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Choices[0].Message.Content != "You said: hi there" || cc.Usage.TotalTokens != cc.Usage.PromptTokens+cc.Usage.CompletionTokens {
		t.Errorf("completion = %s", cc.RawJSON())
	}

	msg.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, msg)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != "You said: hi there" || acc.Usage.TotalTokens == 0 || acc.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("accumulated %+v usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}

	rs := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "fake-gpt",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream it")}})
	var text string
	var usage responses.ResponseUsage
	for rs.Next() {
		ev := rs.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed":
			usage = ev.Response.Usage
		}
	}
	if rs.Err() != nil || text != "You said: stream it" || usage.OutputTokensDetails.ReasoningTokens == 0 {
		t.Errorf("responses stream: %v %q %+v", rs.Err(), text, usage)
	}

	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "e",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64})
	if err != nil || len(emb.Data[0].Embedding) != 8 {
		t.Errorf("base64 embeddings: %v", err)
	}
}

func TestStreamUsageFieldFollowsIncludeUsage(t *testing.T) {
	r, _ := start(t, fakellm.Options{})
	_, without := post(t, r.URL+"/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"a b"}]}`)
	if strings.Contains(without, `"usage"`) {
		t.Errorf("usage without include_usage:\n%s", without)
	}
	_, with := post(t, r.URL+"/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"a b"}]}`)
	events := strings.Split(strings.TrimSpace(with), "\n\n")
	last := events[len(events)-2] // before [DONE]
	if !strings.Contains(last, `"choices":[],"usage":{"prompt_tokens":2,`) {
		t.Errorf("usage chunk = %s", last)
	}
	for _, ev := range events[:len(events)-2] {
		if !strings.HasSuffix(ev, `"usage":null}`) {
			t.Errorf("chunk without usage:null: %s", ev)
		}
	}
	if events[len(events)-1] != "data: [DONE]" {
		t.Errorf("last event %q", events[len(events)-1])
	}
}

func TestFaults(t *testing.T) {
	var gone = make(chan fakellm.ClientGone, 1)
	r, client := start(t, fakellm.Options{Capture: true, OnClientGone: func(g fakellm.ClientGone) { gone <- g }})
	ctx := context.Background()
	msg := openai.ChatCompletionNewParams{Model: "fake-gpt", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("one two three")}}

	r.Push(fakellm.Fault{Status: 429, Header: http.Header{"Retry-After": {"7"}}}, fakellm.Fault{Status: 503, Body: `{"error":{"message":"custom"}}`})
	_, err := client.Chat.Completions.New(ctx, msg)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Response.Header.Get("Retry-After") != "7" {
		t.Errorf("first: %v", err)
	}
	status, body := post(t, r.URL+"/chat/completions", `{}`)
	if status != 503 || body != `{"error":{"message":"custom"}}` {
		t.Errorf("second: %d %s", status, body)
	}
	if _, err := client.Chat.Completions.New(ctx, msg); err != nil {
		t.Errorf("queue not drained: %v", err)
	}

	r.Push(fakellm.Fault{DisconnectAfter: 2})
	s := client.Chat.Completions.NewStreaming(ctx, msg)
	n := 0
	for s.Next() {
		n++
	}
	if n != 2 || s.Err() == nil {
		t.Errorf("disconnect: %d chunks, err %v", n, s.Err())
	}

	r.Push(fakellm.Fault{StallAfter: 1})
	cctx, cancel := context.WithCancel(ctx)
	s = client.Chat.Completions.NewStreaming(cctx, msg)
	if !s.Next() {
		t.Fatal(s.Err())
	}
	cancel()
	select {
	case g := <-gone:
		if g.Events != 1 || !strings.HasSuffix(g.Path, "/chat/completions") {
			t.Errorf("gone = %+v", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("client going away was not reported")
	}
	reqs := r.Requests()
	if len(reqs) != 5 || !reqs[4].Gone || !bytes.Contains(reqs[0].Body, []byte("one two three")) {
		t.Errorf("captured %d requests", len(reqs))
	}
	if r.GoneCount() != 1 || r.RequestCount() != 5 {
		t.Errorf("gone %d requests %d", r.GoneCount(), r.RequestCount())
	}
}

func TestAPIKeyRequired(t *testing.T) {
	r, _ := start(t, fakellm.Options{APIKey: "secret"})
	status, body := post(t, r.URL+"/models", ``)
	if status != 404 && status != 401 {
		t.Errorf("status %d %s", status, body)
	}
	req, _ := http.NewRequest(http.MethodGet, r.URL+"/models", nil)
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("with key: %v %v", err, resp)
	}
	resp.Body.Close()
	req.Header.Set("Authorization", "Bearer wrong")
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 401 {
		t.Errorf("wrong key: %d", resp.StatusCode)
	}
	resp.Body.Close()
}

// demoLikeTools are offered the way an agent passes GET /v1/tools to a
// model: several functions, of which the fake must pick by their words.
func demoLikeTools() []openai.ChatCompletionToolUnionParam {
	fn := func(name, desc string, params map[string]any) openai.ChatCompletionToolUnionParam {
		return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: name, Description: openai.String(desc), Parameters: params})
	}
	return []openai.ChatCompletionToolUnionParam{
		fn("client__now", "The user's local time and time zone, read from their browser's clock.", map[string]any{"type": "object", "properties": map[string]any{}}),
		fn("demo__transfer", "Send money to someone. Amounts over 100 need a human's approval.", map[string]any{"type": "object",
			"properties": map[string]any{"amount": map[string]any{"type": "number"}, "to": map[string]any{"type": "string"}}, "required": []string{"amount", "to"}}),
		fn("demo__weather", "Current weather for a city.", map[string]any{"type": "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}),
	}
}

// TestToolCallRoundTripWithOpenAISDK is the function-calling loop an agent
// runs: the model picks a tool from the user's words, the agent sends the
// tool's result back as a tool message, the model answers with text.
func TestToolCallRoundTripWithOpenAISDK(t *testing.T) {
	r, client := start(t, fakellm.Options{Capture: true})
	ctx := context.Background()
	for _, tt := range []struct {
		prompt, function, args string
	}{
		{"What's the weather in Paris?", "demo__weather", `{"city":"Paris"}`},
		{"What time is it?", "client__now", `{}`},
		{"Send 250 to Bob", "demo__transfer", `{"amount":250,"to":"Bob"}`},
	} {
		for _, streaming := range []bool{false, true} {
			params := openai.ChatCompletionNewParams{Model: "demo-llm", Tools: demoLikeTools(),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage(tt.prompt)}}
			var msg openai.ChatCompletionMessage
			var finish string
			if streaming {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				stream := client.Chat.Completions.NewStreaming(ctx, params)
				var acc openai.ChatCompletionAccumulator
				argChunks := 0
				for stream.Next() {
					c := stream.Current()
					acc.AddChunk(c)
					if len(c.Choices) > 0 && len(c.Choices[0].Delta.ToolCalls) > 0 && c.Choices[0].Delta.ToolCalls[0].Function.Name == "" {
						argChunks++
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				if argChunks == 0 {
					t.Errorf("%q: the arguments did not come as delta chunks", tt.prompt)
				}
				if acc.Usage.TotalTokens == 0 {
					t.Errorf("%q: no usage chunk", tt.prompt)
				}
				msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
			} else {
				cc, err := client.Chat.Completions.New(ctx, params)
				if err != nil {
					t.Fatal(err)
				}
				msg, finish = cc.Choices[0].Message, cc.Choices[0].FinishReason
				if !strings.Contains(cc.RawJSON(), `"content":null`) {
					t.Errorf("a tool-call message has content null in OpenAI's format: %s", cc.RawJSON())
				}
			}
			if finish != "tool_calls" || len(msg.ToolCalls) != 1 {
				t.Fatalf("%q (stream %v): finish %q, tool calls %+v", tt.prompt, streaming, finish, msg.ToolCalls)
			}
			call := msg.ToolCalls[0]
			if call.Function.Name != tt.function || call.Function.Arguments != tt.args || !strings.HasPrefix(call.ID, "call_") || call.Type != "function" {
				t.Fatalf("%q (stream %v): called %+v, want %s(%s)", tt.prompt, streaming, call, tt.function, tt.args)
			}

			// The tool's result goes back; the model answers with text.
			params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage(`{"ok":true,"n":1}`, call.ID))
			var answer string
			if streaming {
				stream := client.Chat.Completions.NewStreaming(ctx, params)
				var acc openai.ChatCompletionAccumulator
				for stream.Next() {
					acc.AddChunk(stream.Current())
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				answer, finish = acc.Choices[0].Message.Content, acc.Choices[0].FinishReason
			} else {
				cc, err := client.Chat.Completions.New(ctx, params)
				if err != nil {
					t.Fatal(err)
				}
				answer, finish = cc.Choices[0].Message.Content, cc.Choices[0].FinishReason
			}
			if answer != "Tool result: ok: true, n: 1" || finish != "stop" {
				t.Errorf("%q (stream %v): after the tool result: %q, finish %q", tt.prompt, streaming, answer, finish)
			}
		}
	}
	// What went upstream on the second turn is OpenAI's shape: an assistant
	// message with tool_calls, then the tool message naming the call.
	reqs := r.Requests()
	last := string(reqs[len(reqs)-1].Body)
	if !strings.Contains(last, `"tool_calls":[{"id":"call_`) || !strings.Contains(last, `"role":"tool"`) {
		t.Errorf("second-turn request: %s", last)
	}

	// A message no tool's words match is answered with text, tools or not.
	cc, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "demo-llm", Tools: demoLikeTools(),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")}})
	if err != nil {
		t.Fatal(err)
	}
	if cc.Choices[0].FinishReason != "stop" || cc.Choices[0].Message.Content != "You said: hello there" {
		t.Errorf("no tool matches: %s", cc.RawJSON())
	}
}

// The Responses API picks tools by the same rule.
func TestResponsesFunctionCallPicksByWords(t *testing.T) {
	_, client := start(t, fakellm.Options{})
	params := map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}
	resp, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "demo-llm",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Oslo please")},
		Tools: []responses.ToolUnionParam{
			responses.ToolParamOfFunction("send_money", map[string]any{"type": "object"}, false),
			responses.ToolParamOfFunction("get_weather", params, false),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	fc := resp.Output[0].AsFunctionCall()
	if fc.Name != "get_weather" || fc.Arguments != `{"city":"Oslo"}` {
		t.Errorf("function call = %s", resp.Output[0].RawJSON())
	}
}
