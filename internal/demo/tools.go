package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// The demo's tools (issue 4 item 11), registered by RegisterTools:
//
//   - demo.weather {city}: a server tool on the demo's tool listener that
//     answers made-up but deterministic weather;
//   - client.now {}: a client tool the chat page runs in the browser,
//     answering its local time and time zone;
//   - demo.transfer {amount, to}: a server tool whose policy sends any
//     amount over 100 to a human for approval (rule "large-transfer").
//
// Each is offered to the demo agent and to the team's worker whose job it is
// (demo.weather to "weather", demo.transfer to "payments"; team.go).
//
// Every one has on_failure "return_to_agent": under the default, fail_run, a
// rejected transfer or an offline browser would fail the whole run and the
// user would see only an error code. Handed back to the agent as a
// *ToolError, the failure is explained in the chat ("the transfer was
// rejected") and the run ends normally.
const (
	// TransferApprovalRule names the policy rule that asks for approval.
	TransferApprovalRule = "large-transfer"
	// TransferApprovalThreshold is the amount above which a transfer needs approval.
	TransferApprovalThreshold = 100
)

// Names of the demo's tools (see RegisterTools).
const (
	ToolWeather  = "demo.weather"
	ToolNow      = "client.now"
	ToolTransfer = "demo.transfer"
)

// toolDefinition is the body of PUT /v1/tools/{tool_name} (DESIGN §7).
type toolDefinition struct {
	Kind              string          `json:"kind"`
	Description       string          `json:"description"`
	Parameters        json.RawMessage `json:"parameters"`
	Endpoint          string          `json:"endpoint,omitempty"`
	Policy            toolPolicy      `json:"policy"`
	TimeoutMS         int64           `json:"timeout_ms,omitempty"`
	ApprovalTimeoutMS int64           `json:"approval_timeout_ms,omitempty"`
	OnFailure         string          `json:"on_failure"`
	// Agents are the agents that may call the tool: the demo agent, and
	// the team's worker whose job it is (team.go). The planner gets none:
	// it works through the workers.
	Agents []string `json:"agents,omitempty"`
}

type toolPolicy struct {
	Decision string       `json:"decision"`
	Rules    []policyRule `json:"rules,omitempty"`
}

type policyRule struct {
	Name     string `json:"name,omitempty"`
	When     string `json:"when"`
	Decision string `json:"decision"`
}

// toolDefinitions are the demo's tools for a tool listener at toolsURL.
func toolDefinitions(toolsURL string) map[string]toolDefinition {
	base := strings.TrimRight(toolsURL, "/")
	return map[string]toolDefinition{
		ToolWeather: {
			Kind:        "server",
			Description: "Current weather or forecast for a city (made-up data, but the same city always gets the same answer).",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","minLength":1,"maxLength":100,"description":"City name, e.g. Paris"}},"required":["city"],"additionalProperties":false}`),
			Endpoint:    base + "/weather",
			Policy:      toolPolicy{Decision: "allow"},
			TimeoutMS:   10_000,
			OnFailure:   "return_to_agent",
			Agents:      []string{AgentID, WeatherID},
		},
		ToolNow: {
			Kind:        "client",
			Description: "The user's local time and time zone, read from their browser's clock.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
			Policy:      toolPolicy{Decision: "allow"},
			// A browser answers in milliseconds or not at all; do not keep
			// the user waiting for a tab that went away.
			TimeoutMS: 15_000,
			OnFailure: "return_to_agent",
			Agents:    []string{AgentID},
		},
		ToolTransfer: {
			Kind:        "server",
			Description: "Send money to someone (nothing is really sent). Amounts over 100 need a human's approval.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number","exclusiveMinimum":0},"to":{"type":"string","minLength":1,"maxLength":100}},"required":["amount","to"],"additionalProperties":false}`),
			Endpoint:    base + "/transfer",
			Policy: toolPolicy{Decision: "allow", Rules: []policyRule{
				{Name: TransferApprovalRule, When: fmt.Sprintf("args.amount > %d", TransferApprovalThreshold), Decision: "require_approval"},
			}},
			TimeoutMS:         10_000,
			ApprovalTimeoutMS: 300_000,
			OnFailure:         "return_to_agent",
			Agents:            []string{AgentID, PaymentsID},
		},
	}
}

// RegisterTools registers the demo's tools with the platform at platformURL
// (PUT /v1/tools/{name} with the admin key, as an operator would); the
// server tools point at the tool listener at toolsURL (Agent.ToolsURL).
// Registering again replaces the definitions.
func RegisterTools(ctx context.Context, platformURL, adminKey, toolsURL string) error {
	defs := toolDefinitions(toolsURL)
	for _, name := range []string{ToolWeather, ToolNow, ToolTransfer} {
		if err := putTool(ctx, platformURL, adminKey, name, defs[name]); err != nil {
			return fmt.Errorf("register tool %s: %w", name, err)
		}
	}
	return nil
}

func putTool(ctx context.Context, platformURL, adminKey, name string, def toolDefinition) error {
	body, err := json.Marshal(def)
	if err != nil {
		return err
	}
	u := strings.TrimRight(platformURL, "/") + "/v1/tools/" + url.PathEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("PUT %s: HTTP %d: %s", u, resp.StatusCode, bytes.TrimSpace(b))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return nil
}

// toolCallBody is what the platform POSTs to a server tool's endpoint.
type toolCallBody struct {
	ToolCallID string          `json:"tool_call_id"`
	RunID      string          `json:"run_id"`
	ToolName   string          `json:"tool_name"`
	Args       json.RawMessage `json:"args"`
}

// maxCachedAnswers bounds the idempotency cache; the oldest answers go first.
const maxCachedAnswers = 1024

// toolServer serves the demo's server tools: POST /weather and POST
// /transfer. The platform sends each call's id as Idempotency-Key and may
// send the same call again (a retry after a lost answer); the first answer
// to a key is kept and repeated, so a retried transfer is not sent twice.
type toolServer struct {
	mux *http.ServeMux

	mu        sync.Mutex // serialises calls: the fake tools are instant
	answers   map[string]cachedAnswer
	order     []string // keys, oldest first, for eviction
	transfers int      // number of transfers made, for their ids
}

type cachedAnswer struct {
	status int
	body   []byte
}

func newToolServer() *toolServer {
	t := &toolServer{mux: http.NewServeMux(), answers: map[string]cachedAnswer{}}
	t.mux.HandleFunc("POST /weather", t.handle(weather))
	t.mux.HandleFunc("POST /transfer", t.handle(t.transfer))
	return t
}

func (t *toolServer) ServeHTTP(w http.ResponseWriter, r *http.Request) { t.mux.ServeHTTP(w, r) }

// toolFunc runs one call; an error answers 400 with it.
type toolFunc func(args json.RawMessage) (any, error)

func (t *toolServer) handle(f toolFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body toolCallBody
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil {
			writeToolJSON(w, http.StatusBadRequest, map[string]string{"error": "body is not a tool call: " + err.Error()})
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			key = body.ToolCallID
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		ck := r.URL.Path + "\x00" + key
		if a, ok := t.answers[ck]; ok {
			w.Header().Set("Idempotent-Replayed", "true")
			writeToolRaw(w, a.status, a.body)
			return
		}
		status := http.StatusOK
		res, err := f(body.Args)
		if err != nil {
			status, res = http.StatusBadRequest, map[string]string{"error": err.Error()}
		}
		out, _ := json.Marshal(res)
		if key != "" {
			t.remember(ck, cachedAnswer{status: status, body: out})
		}
		writeToolRaw(w, status, out)
	}
}

// remember caches an answer; t.mu is held.
func (t *toolServer) remember(key string, a cachedAnswer) {
	if len(t.order) >= maxCachedAnswers {
		delete(t.answers, t.order[0])
		t.order = t.order[1:]
	}
	t.answers[key] = a
	t.order = append(t.order, key)
}

var conditions = []string{"sunny", "partly cloudy", "cloudy", "light rain", "showers", "windy", "foggy", "clear"}

// weather makes up the weather of a city; the same city always gets the
// same answer, so the demo is reproducible.
func weather(raw json.RawMessage) (any, error) {
	var args struct {
		City string `json:"city"`
	}
	if err := json.Unmarshal(raw, &args); err != nil || strings.TrimSpace(args.City) == "" {
		return nil, fmt.Errorf("args must be {\"city\": string}")
	}
	city := strings.TrimSpace(args.City)
	h := fnv.New32a()
	h.Write([]byte(strings.ToLower(city)))
	n := h.Sum32()
	temp := int(n%36) - 5
	cond := conditions[(n>>8)%uint32(len(conditions))]
	if temp <= 0 {
		cond = "snow"
	}
	return map[string]any{
		"city":         city,
		"temp_c":       temp,
		"conditions":   cond,
		"humidity_pct": 30 + int((n>>16)%60),
		"wind_kph":     int((n >> 24) % 40),
		"source":       "agentplane demo (made-up data)",
	}, nil
}

// transfer pretends to send money.
func (t *toolServer) transfer(raw json.RawMessage) (any, error) {
	var args struct {
		Amount float64 `json:"amount"`
		To     string  `json:"to"`
	}
	if err := json.Unmarshal(raw, &args); err != nil || args.Amount <= 0 || strings.TrimSpace(args.To) == "" {
		return nil, fmt.Errorf("args must be {\"amount\": number > 0, \"to\": string}")
	}
	t.transfers++
	return map[string]any{
		"transfer_id": fmt.Sprintf("tr_%04d", t.transfers),
		"amount":      args.Amount,
		"to":          strings.TrimSpace(args.To),
		"status":      "sent",
	}, nil
}

func writeToolJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	writeToolRaw(w, status, b)
}

func writeToolRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
