package tool

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Tool kinds (Definition.Kind).
const (
	// KindServer tools are HTTP services the platform POSTs to.
	KindServer = "server"
	// KindClient tools run in the end user's client, reached through the ingress.
	KindClient = "client"
	// KindAgent tools are call_<agent_id>: their execution is a child run of
	// that agent (DESIGN §11). Only names with AgentToolPrefix have it.
	KindAgent = "agent"
	// KindMCP: see mcpname.go.
)

// AgentToolPrefix starts the name of every KindAgent tool: call_<agent_id>.
// Names with it are reserved for agent calls.
const AgentToolPrefix = "call_"

// AgentToolParameters is the fixed schema of a call_<agent> tool.
const AgentToolParameters = `{"type":"object","required":["message"],"properties":{"message":{"type":"string","description":"what to ask the agent"}},"additionalProperties":false}`

// Policy decisions (Policy.Decision, Rule.Decision, Decision.Decision).
const (
	DecisionAllow           = "allow"
	DecisionRequireApproval = "require_approval"
	DecisionBlock           = "block"
)

// What a failed tool call does to its run (Definition.OnFailure), seed 000 §8.1.
const (
	// OnFailureFailRun fails the run with the tool call's error code.
	OnFailureFailRun = "fail_run"
	// OnFailureReturnToAgent hands the failure back to the agent, which decides.
	OnFailureReturnToAgent = "return_to_agent"
)

// Defaults and bounds applied by Compile.
const (
	DefaultTimeoutMS         = 60_000
	MaxTimeoutMS             = 3_600_000
	DefaultApprovalTimeoutMS = 600_000
	MaxApprovalTimeoutMS     = 7 * 24 * 3_600_000

	// MaxNameLen bounds Definition.Name. The effective limit is lower: the name
	// must also fit OpenAI's 64-character function names once "." becomes "__"
	// (see FunctionName).
	MaxNameLen = 128
	// MaxDescriptionLen bounds Definition.Description, in bytes. Descriptions are
	// sent to a model with every request that offers the tool, so they must stay small.
	MaxDescriptionLen = 8 << 10
	// MaxParametersLen bounds the JSON Schema, in bytes (compact form).
	MaxParametersLen = 64 << 10
	// MaxRules bounds Policy.Rules. A long list of rules is a policy nobody
	// can review; DecideTimeout bounds the time one decision takes anyway.
	MaxRules = 32
	// MaxRuleExprLen bounds Rule.When, in code points.
	MaxRuleExprLen = 2048
	// MaxAgents bounds Definition.Agents.
	MaxAgents = 1024
)

// defaultParameters is the schema of a tool whose Definition leaves
// parameters out: any JSON object.
const defaultParameters = `{"type":"object"}`

// Definition is a tool as an administrator declares it: over HTTP
// (PUT /v1/tools/{tool_name}, DESIGN §7) or in the config file (YAML, see
// DefinitionFromYAML). Zero values mean "use the default"; Compile checks it
// and fills the defaults in.
type Definition struct {
	// Name is 1-128 characters of [A-Za-z0-9_.-], e.g. "payments.transfer",
	// without "--", and must map to an OpenAI function name (see
	// FunctionName). An MCP tool's is "{server}@{tool}".
	Name string `json:"tool_name" yaml:"tool_name"`
	// Kind is KindServer, KindClient, KindMCP or, for call_<agent_id>, KindAgent.
	Kind string `json:"kind" yaml:"kind"`
	// Description tells a model what the tool does.
	Description string `json:"description" yaml:"description"`
	// Parameters is the JSON Schema of the args, an object schema with
	// "type": "object". Empty means {"type":"object"}. In YAML it is written as
	// a map and converted (see DefinitionFromYAML).
	Parameters json.RawMessage `json:"parameters" yaml:"-"`
	// Endpoint is where a server tool is POSTed to. Required for server tools,
	// refused for client tools. Compile does not check the URL: SSRF rules are
	// applied by the caller (internal/agent).
	Endpoint string `json:"endpoint,omitempty" yaml:"endpoint"`
	// Policy decides whether a call runs, waits for approval or is blocked.
	Policy Policy `json:"policy" yaml:"policy"`
	// TimeoutMS bounds one execution; default DefaultTimeoutMS (none for
	// KindAgent), at most MaxTimeoutMS.
	TimeoutMS int64 `json:"timeout_ms" yaml:"timeout_ms"`
	// ApprovalTimeoutMS is how long an approval may stay pending before it
	// expires; default DefaultApprovalTimeoutMS, at most MaxApprovalTimeoutMS.
	ApprovalTimeoutMS int64 `json:"approval_timeout_ms" yaml:"approval_timeout_ms"`
	// OnFailure is OnFailureFailRun (default; OnFailureReturnToAgent for
	// KindAgent) or OnFailureReturnToAgent.
	OnFailure string `json:"on_failure" yaml:"on_failure"`
	// Agents lists the agent ids allowed to call the tool; empty means every agent.
	Agents []string `json:"agents,omitempty" yaml:"agents"`
	// Redact names argument paths ("card.number", "cards.*.cvv") whose
	// values the platform replaces with "[redacted]" in everything it
	// records or shows (DESIGN §15); the tool itself still gets them.
	// Server and MCP tools only. See redact.go.
	Redact []string `json:"redact,omitempty" yaml:"redact"`
}

// Policy is a default decision and conditional rules over a call. Rules are
// tried in order; the first whose When is true decides. When none matches,
// Decision does.
type Policy struct {
	// Decision is DecisionAllow (default), DecisionRequireApproval or DecisionBlock.
	Decision string `json:"decision" yaml:"decision"`
	// Rules are tried in order; the first match wins.
	Rules []Rule `json:"rules,omitempty" yaml:"rules"`
}

// Rule is one conditional policy rule.
type Rule struct {
	// When is a CEL expression of type bool over the variables args (map),
	// agent_id, user_id and tool_name (strings), e.g. `args.amount > 100`.
	When string `json:"when" yaml:"when"`
	// Decision applies when When is true.
	Decision string `json:"decision" yaml:"decision"`
	// Name labels the rule in Decision.Rule and in the policy_decision event;
	// optional (unnamed rules are reported as "rule[i]").
	Name string `json:"name,omitempty" yaml:"name"`
}

// ValidationError says which field of a Definition is wrong and why, so the
// HTTP layer can answer 400 naming the field.
type ValidationError struct {
	// Field is the field's JSON path, e.g. "tool_name" or "policy.rules[1].when".
	// It is empty when the error is not about one field (a malformed YAML node).
	Field   string
	Message string
	// Err is the underlying cause, if any (a schema or CEL compiler error).
	Err error
}

// Error returns the field and the message.
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "invalid tool definition: " + e.Message
	}
	return "invalid tool definition: " + e.Field + ": " + e.Message
}

// Unwrap returns the underlying cause.
func (e *ValidationError) Unwrap() error { return e.Err }

func invalid(field string, err error, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...), Err: err}
}

// Tool is a compiled Definition: its schema and policy rules are ready to
// evaluate. A Tool is immutable after Compile and safe for concurrent use by
// many goroutines; treat Def as read-only (change a tool by compiling a new
// Definition and swapping the *Tool).
type Tool struct {
	// Def is the definition with every default filled in and Parameters in
	// compact form; this is what GET /v1/tools should show.
	Def Definition

	schema *jsonschema.Schema
	rules  []compiledRule
}

// compiledRule is a Rule with its CEL program.
type compiledRule struct {
	label    string // Name, or "rule[i]"
	when     string
	decision string
	prg      cel.Program
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_.\-]+$`)

// Compile checks every field of d, fills the defaults in and compiles the
// parameters schema and the policy rules, so that nothing about a tool can
// fail at call time that could have been refused when it was registered.
// Errors are *ValidationError. Compile does not check the endpoint URL.
//
// Compile costs about a millisecond (the schema is checked against its
// meta-schema, each rule is parsed and type-checked): compile once when a
// tool is registered or loaded and keep the *Tool, never per call.
func Compile(d Definition) (*Tool, error) {
	// Copy the slices so that the caller changing its Definition afterwards
	// cannot change the Tool.
	d.Parameters = slices.Clone(d.Parameters)
	d.Agents = slices.Clone(d.Agents)
	d.Policy.Rules = slices.Clone(d.Policy.Rules)
	d.Redact = slices.Clone(d.Redact)

	if err := checkName(d.Name, d.Kind); err != nil {
		return nil, err
	}
	agentTool := strings.HasPrefix(d.Name, AgentToolPrefix)
	switch d.Kind {
	case KindServer:
		if d.Endpoint == "" {
			return nil, invalid("endpoint", nil, "is required for a server tool")
		}
	case KindClient:
		if d.Endpoint != "" {
			return nil, invalid("endpoint", nil, "must be empty for a client tool (it runs in the user's client)")
		}
	case KindAgent:
		if !agentTool {
			return nil, invalid("kind", nil, "%q is only for tools named %s<agent_id>", KindAgent, AgentToolPrefix)
		}
		if d.Endpoint != "" {
			return nil, invalid("endpoint", nil, "must be empty for an agent tool (its execution is a run of the agent)")
		}
		if len(d.Parameters) > 0 && string(d.Parameters) != AgentToolParameters {
			return nil, invalid("parameters", nil, "are fixed for an agent tool: {message: string}")
		}
		if len(d.Agents) > 0 {
			return nil, invalid("agents", nil, "must be empty for an agent tool: the calling agent's linked_agents decide who may call it")
		}
		d.Parameters = json.RawMessage(AgentToolParameters)
	case KindMCP:
		if d.Endpoint != "" {
			return nil, invalid("endpoint", nil, "must be empty for an MCP tool (it runs on its MCP server)")
		}
	case "":
		return nil, invalid("kind", nil, `is required: "server", "client" or "mcp"`)
	default:
		return nil, invalid("kind", nil, `must be "server", "client" or "mcp", not %q`, d.Kind)
	}
	if agentTool && d.Kind != KindAgent {
		return nil, invalid("tool_name", nil, "names starting with %q are reserved for calls of agents (kind %q)", AgentToolPrefix, KindAgent)
	}
	if len(d.Description) > MaxDescriptionLen {
		return nil, invalid("description", nil, "is %d bytes; at most %d are allowed", len(d.Description), MaxDescriptionLen)
	}
	if !utf8.ValidString(d.Description) {
		return nil, invalid("description", nil, "is not valid UTF-8")
	}

	params, schema, err := compileSchema(d.Parameters)
	if err != nil {
		return nil, err
	}
	d.Parameters = params

	// An agent call has no timeout unless one is given: it runs as long as
	// its child run (0 stays 0, "none").
	timeoutDefault := int64(DefaultTimeoutMS)
	if d.Kind == KindAgent {
		timeoutDefault = 0
	}
	if d.TimeoutMS, err = defaultInRange("timeout_ms", d.TimeoutMS, timeoutDefault, MaxTimeoutMS); err != nil {
		return nil, err
	}
	if d.ApprovalTimeoutMS, err = defaultInRange("approval_timeout_ms", d.ApprovalTimeoutMS, DefaultApprovalTimeoutMS, MaxApprovalTimeoutMS); err != nil {
		return nil, err
	}

	switch d.OnFailure {
	case "":
		d.OnFailure = OnFailureFailRun
		if d.Kind == KindAgent {
			// A sub-agent's failure is the calling agent's to handle (seed 002).
			d.OnFailure = OnFailureReturnToAgent
		}
	case OnFailureFailRun, OnFailureReturnToAgent:
	default:
		return nil, invalid("on_failure", nil, `must be "fail_run" or "return_to_agent", not %q`, d.OnFailure)
	}

	if len(d.Agents) > MaxAgents {
		return nil, invalid("agents", nil, "lists %d agents; at most %d are allowed", len(d.Agents), MaxAgents)
	}
	for i, a := range d.Agents {
		if a == "" || len(a) > MaxNameLen {
			return nil, invalid(fmt.Sprintf("agents[%d]", i), nil, "must be an agent id of 1-%d characters", MaxNameLen)
		}
	}

	if err := checkRedact(d.Kind, d.Redact); err != nil {
		return nil, err
	}

	rules, err := compilePolicy(&d.Policy)
	if err != nil {
		return nil, err
	}
	return &Tool{Def: d, schema: schema, rules: rules}, nil
}

// CheckAgentID reports whether an agent id makes a valid call_<agent_id>
// tool name: its OpenAI function name must fit and map back to it, so an
// id with "__", "_." or "--" (or too long once "call_" and the "." → "__"
// spelling are added) could be called in the direct form only.
// Registration refuses such ids.
func CheckAgentID(agentID string) error {
	return checkName(AgentToolPrefix+agentID, KindAgent)
}

// checkName enforces the name pattern and that the OpenAI function name
// derived from it is valid and maps back to it (see FunctionName). MCP
// tools, and only they, are named "{server}@{tool}".
func checkName(name, kind string) error {
	if name == "" {
		return invalid("tool_name", nil, "is required")
	}
	if kind == KindMCP || IsMCPName(name) {
		if kind != KindMCP && kind != "" {
			return invalid("tool_name", nil, `"{server}@{tool}" names an MCP server's tool; its kind is "mcp"`)
		}
		return checkMCPName(name)
	}
	if strings.Contains(name, mcpFunctionSeparator) {
		return invalid("tool_name", nil, `must not contain "--": that is how OpenAI function names spell the "@" of an MCP tool, got %q`, truncateRunes(name, 140))
	}
	if len(name) > MaxNameLen || !namePattern.MatchString(name) {
		return invalid("tool_name", nil, "must be 1-%d characters of [A-Za-z0-9_.-], got %q", MaxNameLen, truncateRunes(name, 140))
	}
	fn := FunctionName(name)
	if len(fn) > maxFunctionNameLen {
		return invalid("tool_name", nil, "becomes the OpenAI function name %q, longer than the %d characters OpenAI allows (each \".\" counts as two)", fn, maxFunctionNameLen)
	}
	if back := ToolNameFromFunction(fn); back != name {
		return invalid("tool_name", nil, `must not contain "__" or "_.": its OpenAI function name %q would map back to %q`, fn, back)
	}
	return nil
}

// defaultInRange returns def for 0 and v for 1..max; anything else is an error.
func defaultInRange(field string, v, def, max int64) (int64, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0 || v > max:
		return 0, invalid(field, nil, "must be between 1 and %d (0 or absent means the default %d), got %d", max, def, v)
	}
	return v, nil
}

// AllowsAgent reports whether agentID may call the tool (Definition.Agents).
func (t *Tool) AllowsAgent(agentID string) bool {
	return len(t.Def.Agents) == 0 || slices.Contains(t.Def.Agents, agentID)
}
