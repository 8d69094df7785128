package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/interpreter"
)

// RuleCostLimit is the CEL runtime cost one rule may spend on one decision
// (cost units are roughly one per basic operation or per element visited).
// Evaluation stops with an error when it is exceeded, so a hostile or
// careless expression, e.g. nested comprehensions over a large list in args,
// cannot hold a CPU. Ordinary rules cost under 100; iterating a list of a few
// thousand elements costs a few thousand; string operations cost a tenth of a
// unit per character (see dynCostEstimator), so comparing two 1 MB strings
// in args already exceeds the limit.
const RuleCostLimit = 100_000

// DecideTimeout bounds the wall-clock time of one Decide over all rules. It
// backs up RuleCostLimit because cel-go's cost tracking itself slows down
// inside large comprehensions (its bookkeeping stack is scanned linearly), so
// time can grow with the square of the cost: measured at about 100 ms for
// 100,000 units over a 3,000-element list, and worse for longer lists. Only
// comprehensions can be interrupted, and only an evaluation that the deadline
// actually cut short fails (see Decide), so a slow scheduler alone does not
// turn cheap rules into blocks; the margin is wide for the same reason.
const DecideTimeout = time.Second

// decideTimeout is DecideTimeout; tests shorten it (export_test.go).
var decideTimeout = DecideTimeout

// interruptCheckFrequency is how many comprehension iterations pass between
// checks of the DecideTimeout deadline. Every iteration: a non-blocking
// channel receive costs nothing next to a CEL iteration, and cel-go counts
// checks across nested comprehensions, so with a sparser poll an outer loop
// can keep missing the deadline (measured: 500 ms past a 250 ms deadline).
const interruptCheckFrequency = 1

// CEL variables a rule may use.
const (
	varArgs     = "args"
	varAgentID  = "agent_id"
	varUserID   = "user_id"
	varToolName = "tool_name"
)

// Rule labels in Decision.Rule that are not rule names.
const (
	// RuleDefault labels a decision taken by Policy.Decision because no rule matched.
	RuleDefault = "default"
)

var ruleNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

// celEnv is shared by every tool: building one takes about a millisecond and
// a cel.Env is safe for concurrent use once built.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		// args is a map so that `args.x` and has(args.x) type-check for any
		// key; its values are dyn because every tool has its own schema.
		cel.Variable(varArgs, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varAgentID, cel.StringType),
		cel.Variable(varUserID, cel.StringType),
		cel.Variable(varToolName, cel.StringType),
		// JSON numbers arrive as doubles; let `args.amount > 100` compare them
		// with integer literals instead of failing with "no such overload".
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxRuleExprLen),
	)
})

// Input is what a rule sees about one call.
type Input struct {
	// Args are the call's args as decoded by encoding/json into map[string]any
	// (numbers float64; json.Number values are converted to float64 too).
	// Use DecodeArgs to get them from the raw JSON.
	Args map[string]any
	// AgentID is the calling agent, UserID the session's user.
	AgentID, UserID string
	// ToolName defaults to the tool's own name when empty.
	ToolName string
}

// Decision is the outcome of a policy check, shaped to be logged as the
// payload of a policy_decision event.
type Decision struct {
	// Decision is DecisionAllow, DecisionRequireApproval or DecisionBlock.
	Decision string `json:"decision"`
	// Rule is the matching rule's name, "rule[i]" for an unnamed rule (i from
	// 0), or RuleDefault when no rule matched.
	Rule string `json:"rule"`
	// Expr is the matching rule's CEL expression; empty for RuleDefault.
	Expr string `json:"expr,omitempty"`
	// Errors lists the rules tried before the decision that failed to evaluate.
	Errors []RuleError `json:"errors,omitempty"`
}

// RuleError is a rule that could not be evaluated for one call.
type RuleError struct {
	// Rule is labelled as in Decision.Rule.
	Rule string `json:"rule"`
	// Message is CEL's error, e.g. "no such key: amount".
	Message string `json:"message"`
}

// compilePolicy checks the policy, fills its default decision in and
// compiles every rule.
func compilePolicy(p *Policy) ([]compiledRule, error) {
	switch p.Decision {
	case "":
		p.Decision = DecisionAllow
	case DecisionAllow, DecisionRequireApproval, DecisionBlock:
	default:
		return nil, invalid("policy.decision", nil, `must be "allow", "require_approval" or "block", not %q`, p.Decision)
	}
	if len(p.Rules) > MaxRules {
		return nil, invalid("policy.rules", nil, "has %d rules; at most %d are allowed", len(p.Rules), MaxRules)
	}
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("tool: build CEL environment: %w", err)
	}
	rules := make([]compiledRule, len(p.Rules))
	names := make(map[string]bool, len(p.Rules))
	for i, r := range p.Rules {
		field := fmt.Sprintf("policy.rules[%d]", i)
		label := fmt.Sprintf("rule[%d]", i)
		if r.Name != "" {
			// The pattern keeps names apart from the "rule[i]" labels.
			if !ruleNamePattern.MatchString(r.Name) || r.Name == RuleDefault {
				return nil, invalid(field+".name", nil, `must be 1-64 characters of [A-Za-z0-9_.-] and not "default", got %q`, truncateRunes(r.Name, 80))
			}
			if names[r.Name] {
				return nil, invalid(field+".name", nil, "%q is used by an earlier rule", r.Name)
			}
			names[r.Name] = true
			label = r.Name
		}
		switch r.Decision {
		case DecisionAllow, DecisionRequireApproval, DecisionBlock:
		case "":
			return nil, invalid(field+".decision", nil, `is required: "allow", "require_approval" or "block"`)
		default:
			return nil, invalid(field+".decision", nil, `must be "allow", "require_approval" or "block", not %q`, r.Decision)
		}
		if r.When == "" {
			return nil, invalid(field+".when", nil, "is required: a CEL expression of type bool")
		}
		ast, iss := env.Compile(r.When)
		if iss.Err() != nil {
			return nil, invalid(field+".when", iss.Err(), "does not compile: %s", iss.Err())
		}
		if !ast.OutputType().IsExactType(cel.BoolType) {
			// dyn is refused too: `args.flag` could be anything at call time,
			// and a rule must not fail for a reason the author could not see
			// when registering it. `args.flag == true` says what is meant.
			return nil, invalid(field+".when", nil, "must be a bool expression, but %q has type %s", r.When, ast.OutputType())
		}
		prg, err := env.Program(ast,
			cel.CostTracking(dynCostEstimator{}),
			cel.CostLimit(RuleCostLimit),
			cel.InterruptCheckFrequency(interruptCheckFrequency))
		if err != nil {
			return nil, invalid(field+".when", err, "cannot be prepared: %v", err)
		}
		rules[i] = compiledRule{label: label, when: r.When, decision: r.Decision, prg: prg}
	}
	return rules, nil
}

// Decide evaluates the tool's rules in order against one call and returns
// the first match's decision, or the default decision when none matches.
//
// A rule whose evaluation fails at run time (a key missing from args, a
// string where a number was expected) counts as not matching and is listed in
// Decision.Errors. Schemas usually leave fields optional, so an expression
// like `args.amount > 100` failing on args without "amount" is expected, not
// exceptional; refusing the call would make every such rule a trap. Where
// the difference matters, authors guard with has(args.x); the errors are
// recorded so the policy_decision event shows what happened.
//
// Decide returns an error only when a rule was stopped by RuleCostLimit, or
// failed after DecideTimeout had passed (an interrupted comprehension looks
// like any other evaluation error): which rule would have matched is then
// unknowable, so Decide fails closed. The Decision returned with the error
// says DecisionBlock and names the rule, ready to log.
func (t *Tool) Decide(in Input) (Decision, error) {
	if len(t.rules) == 0 {
		return Decision{Decision: t.Def.Policy.Decision, Rule: RuleDefault}, nil
	}
	name := in.ToolName
	if name == "" {
		name = t.Def.Name
	}
	args := normalizeArgs(in.Args)
	if args == nil {
		// An empty map keeps has(args.x) working for calls without args.
		args = map[string]any{}
	}
	vars, err := cel.NewActivation(map[string]any{
		varArgs:     args,
		varAgentID:  in.AgentID,
		varUserID:   in.UserID,
		varToolName: name,
	})
	if err != nil {
		return Decision{Decision: DecisionBlock, Rule: RuleDefault}, fmt.Errorf("tool %s: policy input: %w", t.Def.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), decideTimeout)
	defer cancel()

	var errs []RuleError
	for _, r := range t.rules {
		out, _, err := r.prg.ContextEval(ctx, vars)
		if err != nil {
			stopped := errors.As(err, new(interpreter.EvalCancelledError))
			if !stopped && ctx.Err() != nil {
				// A comprehension cut short by the deadline surfaces as an
				// ordinary CEL error, indistinguishable from "no such key";
				// past the deadline, any error may be that one.
				stopped = true
				err = fmt.Errorf("policy evaluation took longer than %v: %w (%w)", decideTimeout, ctx.Err(), err)
			}
			msg := t.scrubRedacted(args, err.Error())
			errs = append(errs, RuleError{Rule: r.label, Message: msg})
			if stopped {
				return Decision{Decision: DecisionBlock, Rule: r.label, Expr: r.when, Errors: errs},
					scrubbedError{fmt.Sprintf("tool %s: policy rule %s: %s", t.Def.Name, r.label, msg), err}
			}
			continue
		}
		// A result is trusted even if the deadline passed meanwhile: CEL
		// drops an error (an interrupted comprehension's included) only where
		// the other operand decides alone, as in `err || true`, so the
		// value is what the finished evaluation would have given.
		matched, ok := out.Value().(bool)
		if !ok {
			// Compile admits only bool expressions; kept so a CEL surprise
			// is recorded rather than misread.
			errs = append(errs, RuleError{Rule: r.label, Message: fmt.Sprintf("result is %s, not bool", out.Type())})
			continue
		}
		if matched {
			return Decision{Decision: r.decision, Rule: r.label, Expr: r.when, Errors: errs}, nil
		}
	}
	return Decision{Decision: t.Def.Policy.Decision, Rule: RuleDefault, Errors: errs}, nil
}

// DecodeArgs decodes raw args into the form Input.Args expects. args must be
// a JSON object. A number beyond float64 (1e999999: JSON allows it, and args
// are stored as sent) is decoded as json.Number and reaches the policy as
// ±Inf (or 0), what float64 makes of it, rather than refusing the call.
func DecodeArgs(args json.RawMessage) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(args, &m); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || !strings.HasPrefix(te.Value, "number") {
			return nil, fmt.Errorf("tool: decode args: %w", err)
		}
		// The rare slow way; the error above quotes the number, which may
		// be a redacted argument's value, so it is never shown.
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		m = nil
		if err := dec.Decode(&m); err != nil {
			return nil, errors.New("tool: decode args: the args are not a JSON object")
		}
		m = normalizeArgs(m)
	}
	if m == nil {
		return nil, errors.New("tool: decode args: args must be a JSON object, got null")
	}
	return m, nil
}

// normalizeArgs converts json.Number values (from a decoder with UseNumber)
// to float64, which CEL knows as double; CEL would otherwise see them as
// strings and every numeric comparison on them would fail. Args without a
// json.Number, the usual case, are used as they are.
func normalizeArgs(m map[string]any) map[string]any {
	if !hasNumber(m) {
		return m
	}
	return convertNumbers(m).(map[string]any)
}

// convertNumbers copies v with every json.Number replaced by a float64.
func convertNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		// Out of range, ParseFloat gives ±Inf or 0 with ErrRange: what a
		// float64 can say of the number.
		if f, err := strconv.ParseFloat(string(v), 64); err == nil || errors.Is(err, strconv.ErrRange) {
			return f
		}
		return string(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = convertNumbers(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = convertNumbers(e)
		}
		return out
	}
	return v
}

func hasNumber(v any) bool {
	switch v := v.(type) {
	case json.Number:
		return true
	case map[string]any:
		for _, e := range v {
			if hasNumber(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasNumber(e) {
				return true
			}
		}
	}
	return false
}
