package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// The demo's multi-agent part (issue 9; seed 004's planner pattern: plan →
// agent 1 → plan → agent 2 → report). Three more real HTTP agents, each on
// its own loopback port, registered through the admin API and running the
// demo agent's function-calling loop with a prompt and tools of its own:
//
//   - "weather", a researcher offered demo.weather;
//   - "payments", offered demo.transfer (over 100 it waits for a human's
//     approval — inside a child run, so the chat page shows the approval in
//     that child's card);
//   - "planner", whose linked_agents are the two workers and the remote
//     A2A currency converter (a2a.go): its tools are call_weather,
//     call_payments and call_currency (GET /v1/tools?run_id=), so each call
//     its model makes is a child run of the planner's run, in the same
//     session (call_currency's speaks A2A to the converter).
//
// With the built-in upstream the planner's model calls the workers in turn
// and then sums their answers up (internal/fakellm: the next matching tool
// not yet called, then a summary), so "Plan my trip: weather in Paris, then
// send 250 to Bob" is deterministic offline.
const (
	PlannerID  = "planner"
	WeatherID  = "weather"
	PaymentsID = "payments"
)

const (
	plannerPrompt = "You are the planner of the agentplane demo. Break the user's request into steps and give each step to the agent " +
		"that can do it, through your call_* tools, one at a time; when every step is done, report briefly what each agent did."
	weatherPrompt  = "You are the weather researcher of the agentplane demo. Look the weather up with your tool and answer in one sentence."
	paymentsPrompt = "You are the payments agent of the agentplane demo. Send money with your tool (transfers over 100 wait for a human's approval) and say what happened."
)

// Member is one agent of the team, as it is registered.
type Member struct {
	AgentID      string
	Name         string
	Description  string
	LinkedAgents []string
	// URL is the agent's endpoint.
	URL string

	agent *Agent
}

// Team is the planner and its workers: ListenTeam, register each member
// (Members is in an order that registers the workers first), then Serve.
type Team struct {
	Members []*Member
}

// ListenTeam reserves a loopback port for each member, so their URLs are
// known before they are registered.
func ListenTeam() (*Team, error) {
	specs := []struct {
		m      Member
		prompt string
	}{
		{Member{AgentID: WeatherID, Name: "Weather researcher", Description: "Looks up the current weather of a city (made-up data)."}, weatherPrompt},
		{Member{AgentID: PaymentsID, Name: "Payments agent", Description: "Sends money to someone; transfers over 100 wait for a human's approval."}, paymentsPrompt},
		{Member{AgentID: PlannerID, Name: "Trip planner", Description: "Plans a request in steps and hands each step to the agent that can do it.",
			LinkedAgents: []string{WeatherID, PaymentsID, CurrencyID}}, plannerPrompt},
	}
	t := &Team{}
	for _, sp := range specs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Stop(context.Background())
			return nil, fmt.Errorf("demo agent %s: %w", sp.m.AgentID, err)
		}
		m := sp.m
		m.URL = "http://" + ln.Addr().String()
		m.agent = &Agent{URL: m.URL, ln: ln, prompt: sp.prompt}
		t.Members = append(t.Members, &m)
	}
	return t, nil
}

// Serve answers each member's invocations, calling model and the tools
// through the platform at platformURL with the member's key (keys, by
// agent id).
func (t *Team) Serve(platformURL string, keys map[string]string, model string) {
	for _, m := range t.Members {
		m.agent.Serve(platformURL, keys[m.AgentID], model)
	}
}

// Stop closes every member.
func (t *Team) Stop(ctx context.Context) error {
	var errs []error
	for _, m := range t.Members {
		errs = append(errs, m.agent.Stop(ctx))
	}
	return errors.Join(errs...)
}
