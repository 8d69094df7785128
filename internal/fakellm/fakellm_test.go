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
