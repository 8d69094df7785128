package a2aserver

import (
	"context"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
)

// A request to an agent served over A2A holds its session (so a client tool
// its run asks for reaches the A2A stream), unless the agent is a remote
// A2A agent, whose runs ask for none: the hold would only cost its two
// presence writes.
func TestHoldOnlyForAgentsWithClientTools(t *testing.T) {
	var held, released []string
	s := &Server{opts: Options{Hold: func(sessionID string) (func(context.Context), func()) {
		held = append(held, sessionID)
		return func(context.Context) {}, func() { released = append(released, sessionID) }
	}}}
	for _, tc := range []struct {
		protocol string
		hold     bool
	}{{"", true}, {store.ProtocolAgentplane, true}, {store.ProtocolA2A, false}} {
		held, released = nil, nil
		c := &call{agent: &store.Agent{AgentID: "a", Protocol: tc.protocol}}
		release := s.hold(context.Background(), c, "ses_1")
		release()
		if got := len(held) == 1 && len(released) == 1; got != tc.hold || (!tc.hold && len(held)+len(released) != 0) {
			t.Errorf("protocol %q: held %v, released %v; want a hold: %v", tc.protocol, held, released, tc.hold)
		}
	}
}
