// Package agentplane is the Go SDK for agents run by agentplane. It uses the
// standard library only.
//
// An agent is an HTTP service. The platform calls POST /invoke once per run
// and reads the answer as server-sent events (DESIGN §5); NewAgentHandler
// turns a HandlerFunc into that service:
//
//	h := agentplane.NewAgentHandler(func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
//		s.State("thinking", nil)
//		return s.Delta("you said: " + req.InputMessage.Content)
//	})
//	http.ListenAndServe("127.0.0.1:9002", h)
//
// A handler may end its turn asking the user (DESIGN §12):
// s.InputRequired("Which city?", nil), or returning an
// *InputRequiredError. The run ends INPUT_REQUIRED; the user's answer is the
// input of a new run with req.ResumesRunID set and the same req.IntentionID.
//
// Inside a handler, req.Client() is a Client bound to the run (transcript,
// context store, tool calls, heartbeats) and to the traceparent the agent
// was invoked with, so the platform's spans of its calls join the run's
// trace (an agent with OpenTelemetry of its own passes its span's instead:
// req.Client().WithTraceparent(...)); req.OpenAIBaseURL,
// req.OpenAIAPIKey and req.OpenAIHeaders configure any OpenAI-compatible SDK
// to send its calls through the platform's LLM proxy. req.MCPConfig gives the
// URL and headers of the platform's MCP server for the run (POST /mcp,
// Streamable HTTP), for an agent that calls its tools with an MCP client
// library instead (github.com/modelcontextprotocol/go-sdk, say): the same
// tools, under the same policy, approvals and deadlines.
//
// The platform client needs the platform's URL and this agent's key (the
// agent_api_key registration returned): AGENTPLANE_URL and
// AGENTPLANE_AGENT_KEY, or AgentHandler.Platform. Without them
// req.Client() is nil and its methods return ErrNotConfigured.
//
// A tool call waits for approvals and client tools by itself and returns the
// result, or a *ToolError saying why the call failed — every failure of the
// call, whether the platform refused it (invalid_args, tool_not_found …) or
// it ended failed (rejected, timeout …):
//
//	res, err := req.Client().Tools().Invoke(ctx, "demo.weather", map[string]any{"city": "Paris"})
//	var te *agentplane.ToolError
//	if errors.As(err, &te) && te.Code == "rejected" {
//		return s.Delta("the request was rejected")
//	}
//
// An agent calls another agent (one of its linked_agents) as a child run and
// follows it; a child that failed gives a *SubAgentError with its code:
//
//	call, err := req.Client().Agents().Invoke(ctx, "weather", "What's the weather in Paris?")
//	if err != nil {
//		return err
//	}
//	defer call.Close()
//	for ev, err := call.Next(); err == nil; ev, err = call.Next() {
//		s.Delta(ev.Text) // the child's deltas, as they come
//	}
//	res, err := call.Result() // {RunID, Status, Output, Usage, TotalUsage, Error}
package agentplane
