package fakellm

import (
	"encoding/json"
	"testing"
)

// plannerTools are a planner's tools: two agents as call_<agent_id>
// functions taking {message}, described by the agents' names and
// descriptions.
const plannerTools = `[
 {"type":"function","function":{"name":"call_weather","description":"Weather researcher: looks up the weather of a city.","parameters":{"type":"object","required":["message"],"properties":{"message":{"type":"string"}}}}},
 {"type":"function","function":{"name":"call_payments","description":"Payments agent: sends money; transfers over 100 need a human's approval.","parameters":{"type":"object","required":["message"],"properties":{"message":{"type":"string"}}}}}
]`

func chatPlanOf(t *testing.T, messages string, extra string) chatPlan {
	t.Helper()
	var req chatRequest
	body := `{"model":"m","tools":` + plannerTools + extra + `,"messages":` + messages + `}`
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	return planChat(&req)
}

// TestPlannerRounds: one message drives two calls in a row, each tool
// once, then a summary of both results; a new user message starts over.
func TestPlannerRounds(t *testing.T) {
	const ask = `{"role":"user","content":"Plan my trip: weather in Paris, then send 250 to Bob"}`
	const call1 = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"call_weather","arguments":"{}"}}]}`
	const res1 = `{"role":"tool","tool_call_id":"c1","content":"Sunny, 21 C in Paris"}`
	const call2 = `{"role":"assistant","content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"call_payments","arguments":"{}"}}]}`
	const res2 = `{"role":"tool","tool_call_id":"c2","content":"{\"amount\":250,\"to\":\"Bob\",\"status\":\"sent\"}"}`

	p := chatPlanOf(t, `[{"role":"system","content":"plan"},`+ask+`]`, "")
	if p.toolName != "call_weather" || p.toolArgs != `{"message":"Plan my trip: weather in Paris"}` {
		t.Fatalf("first: %+v", p)
	}
	p = chatPlanOf(t, `[`+ask+`,`+call1+`,`+res1+`]`, "")
	if p.toolName != "call_payments" || p.toolArgs != `{"message":"send 250 to Bob"}` {
		t.Fatalf("second: %+v", p)
	}
	p = chatPlanOf(t, `[`+ask+`,`+call1+`,`+res1+`,`+call2+`,`+res2+`]`, "")
	if want := "Tool results:\n- call_weather: Sunny, 21 C in Paris\n- call_payments: amount: 250, to: Bob, status: sent"; p.toolName != "" || p.text != want {
		t.Fatalf("summary: %+v\nwant %q", p, want)
	}
	// tool_choice none: the answer, not the next call.
	if p = chatPlanOf(t, `[`+ask+`,`+call1+`,`+res1+`]`, `,"tool_choice":"none"`); p.toolName != "" || p.text != "Tool result: Sunny, 21 C in Paris" {
		t.Fatalf("none: %+v", p)
	}
	// A new user message is a new round: the weather again.
	p = chatPlanOf(t, `[`+ask+`,`+call1+`,`+res1+`,`+call2+`,`+res2+`,{"role":"assistant","content":"done"},{"role":"user","content":"and the weather in Rome?"}]`, "")
	if p.toolName != "call_weather" || p.toolArgs != `{"message":"and the weather in Rome?"}` {
		t.Fatalf("next round: %+v", p)
	}
	// One matching tool: its result, as before.
	p = chatPlanOf(t, `[{"role":"user","content":"weather in Paris"},`+call1+`,`+res1+`]`, "")
	if p.toolName != "" || p.text != "Tool result: Sunny, 21 C in Paris" {
		t.Fatalf("single: %+v", p)
	}
	// One clause matching two tools: one call, then the answer.
	p = chatPlanOf(t, `[{"role":"user","content":"weather for payments in Paris"},`+call1+`,`+res1+`]`, "")
	if p.toolName != "" || p.text != "Tool result: Sunny, 21 C in Paris" {
		t.Fatalf("one clause: %+v", p)
	}
}

// The Responses API follows the same rounds.
func TestPlannerRoundsResponses(t *testing.T) {
	tools := `[{"type":"function","name":"call_weather","description":"Weather researcher: looks up the weather of a city.","parameters":{"type":"object","properties":{"message":{"type":"string"}}}},
	 {"type":"function","name":"call_payments","description":"Payments agent: sends money.","parameters":{"type":"object","properties":{"message":{"type":"string"}}}}]`
	plan := func(input string) chatPlan {
		var req responsesRequest
		if err := json.Unmarshal([]byte(`{"model":"m","tools":`+tools+`,"input":`+input+`}`), &req); err != nil {
			t.Fatal(err)
		}
		return planResponses(&req)
	}
	const ask = `{"role":"user","content":"weather in Paris; and send 250 to Bob"}`
	if p := plan(`[` + ask + `]`); p.toolName != "call_weather" || p.toolArgs != `{"message":"weather in Paris"}` {
		t.Fatalf("first: %+v", p)
	}
	in := `[` + ask + `,{"type":"function_call","call_id":"c1","name":"call_weather","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"sunny"}]`
	if p := plan(in); p.toolName != "call_payments" || p.toolArgs != `{"message":"send 250 to Bob"}` {
		t.Fatalf("second: %+v", p)
	}
	in = in[:len(in)-1] + `,{"type":"function_call","call_id":"c2","name":"call_payments","arguments":"{}"},{"type":"function_call_output","call_id":"c2","output":"sent"}]`
	if p := plan(in); p.text != "Tool results:\n- call_weather: sunny\n- call_payments: sent" {
		t.Fatalf("summary: %+v", p)
	}
}

func TestClauseFor(t *testing.T) {
	weather := toolSpec{Name: "call_weather", Description: "looks up the weather"}
	for msg, want := range map[string]string{
		"weather in Paris":                            "weather in Paris",
		"send 250 to Bob, then weather in Oslo":       "weather in Oslo",
		"weather in Paris then send 250 to Bob":       "weather in Paris",
		"hello, how are you":                          "hello, how are you", // no clause matches
		"Plan: weather in Paris; and weather in Rome": "Plan: weather in Paris",
	} {
		if got := clauseFor(&weather, msg); got != want {
			t.Errorf("clauseFor(%q) = %q, want %q", msg, got, want)
		}
	}
}
