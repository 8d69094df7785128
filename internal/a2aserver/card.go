package a2aserver

import (
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/agentplane/agentplane/internal/store"
)

// bearerScheme names the card's security scheme: a user key as a bearer
// token.
const bearerScheme = a2a.SecuritySchemeName("agentplaneUserKey")

// Card is the public card of ag served at base: its name and description,
// one skill per capability, streaming, a bearer key, and the JSON-RPC URL
// listed once per protocol version it speaks (the v0.3 card fields need an
// interface declared for 0.3, even at the same URL). Nothing secret: not
// the agent's own endpoint, not its key.
func Card(base string, ag *store.Agent) *a2a.AgentCard {
	url := base + "/a2a/" + ag.AgentID
	desc := ag.Description
	if desc == "" {
		desc = "Agent " + ag.Name + ", served by agentplane"
	}
	skills := []a2a.AgentSkill{}
	for _, c := range capabilities(ag) {
		skills = append(skills, a2a.AgentSkill{ID: c, Name: c, Description: ag.Name + ": " + c, Tags: []string{c}})
	}
	if len(skills) == 0 {
		skills = append(skills, a2a.AgentSkill{ID: "chat", Name: "chat", Description: desc, Tags: []string{"chat"}})
	}
	return &a2a.AgentCard{
		Name:        ag.Name,
		Description: desc,
		Version:     "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{
			a2a.NewAgentInterface(url, a2a.TransportProtocolJSONRPC),
			{URL: url, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version},
		},
		Capabilities:       a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain", "application/json"},
		Skills:             skills,
		SecuritySchemes: a2a.NamedSecuritySchemes{
			bearerScheme: a2a.HTTPAuthSecurityScheme{Scheme: "Bearer", Description: "an agentplane user key (AGENTPLANE_API_KEYS)"},
		},
		SecurityRequirements: a2a.SecurityRequirementsOptions{{bearerScheme: a2a.SecuritySchemeScopes{}}},
	}
}

// capabilities decodes the agent's capability list (a JSON array of
// strings; anything else counts as none).
func capabilities(ag *store.Agent) []string {
	var out []string
	_ = jsonUnmarshal(ag.Capabilities, &out)
	return out
}
