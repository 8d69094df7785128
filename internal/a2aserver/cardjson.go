package a2aserver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// v1SchemeKeys are the v1.0 card's keys of each kind of security scheme,
// by the key a2av0's compat producer writes that kind's v1.0 part under.
var v1SchemeKeys = map[string]string{
	"http":          "httpAuthSecurityScheme",
	"apiKey":        "apiKeySecurityScheme",
	"mutualTLS":     "mtlsSecurityScheme",
	"oauth2":        "oauth2SecurityScheme",
	"openIdConnect": "openIdConnectSecurityScheme",
}

// unionCard serves the card a2av0's compat producer writes — the union
// of the v0.3 and v1.0 shapes — with each security scheme's v1.0 part
// under the key v1.0 names it by. The compat producer puts an HTTP
// scheme's under "http", which a v1.0 parser (a2a-go's default
// agentcard.Resolver) refuses: "unknown security scheme type". A v0.3
// parser reads the scheme's own type and scheme fields and ignores the
// rest, so both still read the card.
type unionCard struct {
	compat a2asrv.AgentCardProducer // a2av0.NewAgentCardProducer(…)
}

func (p unionCard) Card(ctx context.Context) (*a2a.AgentCard, error) { return p.compat.Card(ctx) }

func (p unionCard) CardJSON(ctx context.Context) ([]byte, error) {
	jp, ok := p.compat.(a2asrv.AgentCardJSONProducer)
	if !ok {
		return nil, fmt.Errorf("a2aserver: the compat card producer writes no JSON")
	}
	b, err := jp.CardJSON(ctx)
	if err != nil {
		return nil, err
	}
	var card map[string]json.RawMessage
	if err := json.Unmarshal(b, &card); err != nil {
		return nil, err
	}
	raw, ok := card["securitySchemes"]
	if !ok {
		return b, nil
	}
	var schemes map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &schemes); err != nil {
		return nil, err
	}
	for _, sc := range schemes {
		for old, v1 := range v1SchemeKeys {
			if part, ok := sc[old]; ok {
				if _, has := sc[v1]; !has && string(part) != "null" {
					sc[v1] = part
				}
				delete(sc, old)
			}
		}
	}
	if card["securitySchemes"], err = json.Marshal(schemes); err != nil {
		return nil, err
	}
	return json.MarshalIndent(card, "", "  ")
}
