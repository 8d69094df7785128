package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/tool"
)

func withRules(t *testing.T, def string, rules ...tool.Rule) *tool.Tool {
	t.Helper()
	d := transferDef()
	d.Policy = tool.Policy{Decision: def, Rules: rules}
	return mustCompile(t, d)
}

func decide(t *testing.T, tl *tool.Tool, in tool.Input) tool.Decision {
	t.Helper()
	dec, err := tl.Decide(in)
	if err != nil {
		t.Fatalf("Decide(%+v): %v", in, err)
	}
	return dec
}

func args(t *testing.T, s string) map[string]any {
	t.Helper()
	m, err := tool.DecodeArgs(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDecideDefaultOnly(t *testing.T) {
	for _, def := range []string{tool.DecisionAllow, tool.DecisionRequireApproval, tool.DecisionBlock} {
		tl := withRules(t, def)
		got := decide(t, tl, tool.Input{Args: args(t, `{"amount": 1}`)})
		want := tool.Decision{Decision: def, Rule: tool.RuleDefault}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("policy %s: got %+v, want %+v", def, got, want)
		}
	}
}

func TestDecideAmountThreshold(t *testing.T) {
	tl := withRules(t, tool.DecisionAllow,
		tool.Rule{Name: "large", When: "args.amount > 100", Decision: tool.DecisionRequireApproval})
	cases := []struct {
		args, decision, rule string
	}{
		{`{"amount": 150, "to": "bob"}`, tool.DecisionRequireApproval, "large"},
		{`{"amount": 100.5, "to": "bob"}`, tool.DecisionRequireApproval, "large"},
		{`{"amount": 100, "to": "bob"}`, tool.DecisionAllow, tool.RuleDefault},
		{`{"amount": 50, "to": "bob"}`, tool.DecisionAllow, tool.RuleDefault},
	}
	for _, tc := range cases {
		got := decide(t, tl, tool.Input{Args: args(t, tc.args)})
		if got.Decision != tc.decision || got.Rule != tc.rule {
			t.Errorf("%s: got %+v, want %s by %s", tc.args, got, tc.decision, tc.rule)
		}
		if got.Rule == "large" && got.Expr != "args.amount > 100" {
			t.Errorf("Expr = %q, want the rule's expression", got.Expr)
		}
		if len(got.Errors) != 0 {
			t.Errorf("%s: unexpected errors %v", tc.args, got.Errors)
		}
	}
}

// Args decoded with UseNumber (json.Number) behave like float64 ones, and so
// do args nested in objects and arrays.
func TestDecideJSONNumbers(t *testing.T) {
	tl := withRules(t, tool.DecisionAllow,
		tool.Rule{When: "args.amount > 100", Decision: tool.DecisionRequireApproval},
		tool.Rule{When: "args.items.exists(i, i.qty >= 10)", Decision: tool.DecisionBlock})
	in := map[string]any{"amount": json.Number("150")}
	if got := decide(t, tl, tool.Input{Args: in}); got.Decision != tool.DecisionRequireApproval {
		t.Errorf("json.Number amount: got %+v", got)
	}
	if _, ok := in["amount"].(json.Number); !ok {
		t.Error("Decide changed the caller's args")
	}
	nested := map[string]any{"amount": json.Number("1"), "items": []any{map[string]any{"qty": json.Number("12")}}}
	if got := decide(t, tl, tool.Input{Args: nested}); got.Decision != tool.DecisionBlock || got.Rule != "rule[1]" {
		t.Errorf("nested json.Number: got %+v", got)
	}
}

// JSON numbers are doubles; integer literals still compare and equal them.
func TestDecideNumberLiterals(t *testing.T) {
	tl := withRules(t, tool.DecisionAllow,
		tool.Rule{When: "args.amount == 3", Decision: tool.DecisionBlock},
		tool.Rule{When: "int(args.amount) >= 4 && args.amount < 4.5", Decision: tool.DecisionRequireApproval})
	if got := decide(t, tl, tool.Input{Args: args(t, `{"amount": 3}`)}); got.Rule != "rule[0]" {
		t.Errorf("3 == 3.0: got %+v", got)
	}
	if got := decide(t, tl, tool.Input{Args: args(t, `{"amount": 4.2}`)}); got.Rule != "rule[1]" {
		t.Errorf("int(4.2) >= 4: got %+v", got)
	}
}

func TestDecideFirstMatchWins(t *testing.T) {
	tl := withRules(t, tool.DecisionAllow,
		tool.Rule{Name: "blocked-recipient", When: `args.to == "mallory"`, Decision: tool.DecisionBlock},
		tool.Rule{When: "args.amount > 1000", Decision: tool.DecisionBlock},
		tool.Rule{Name: "large", When: "args.amount > 100", Decision: tool.DecisionRequireApproval},
		tool.Rule{Name: "huge", When: "args.amount > 10000", Decision: tool.DecisionAllow},
	)
	cases := []struct{ args, decision, rule string }{
		// mallory is blocked even for small amounts: rule 0 comes first.
		{`{"amount": 5, "to": "mallory"}`, tool.DecisionBlock, "blocked-recipient"},
		// 5000 matches rules 1 and 2; 1 wins. An unnamed rule is labelled by index.
		{`{"amount": 5000, "to": "bob"}`, tool.DecisionBlock, "rule[1]"},
		// 20000 matches 1, 2 and 3; the later allow never gets a say.
		{`{"amount": 20000, "to": "bob"}`, tool.DecisionBlock, "rule[1]"},
		{`{"amount": 500, "to": "bob"}`, tool.DecisionRequireApproval, "large"},
		{`{"amount": 5, "to": "bob"}`, tool.DecisionAllow, tool.RuleDefault},
	}
	for _, tc := range cases {
		got := decide(t, tl, tool.Input{Args: args(t, tc.args)})
		if got.Decision != tc.decision || got.Rule != tc.rule {
			t.Errorf("%s: got %s by %s, want %s by %s", tc.args, got.Decision, got.Rule, tc.decision, tc.rule)
		}
	}
}

func TestDecideOnCaller(t *testing.T) {
	tl := withRules(t, tool.DecisionRequireApproval,
		tool.Rule{Name: "ops-user", When: `user_id.startsWith("ops-")`, Decision: tool.DecisionAllow},
		tool.Rule{Name: "treasury", When: `agent_id == "treasury" && args.amount <= 10000`, Decision: tool.DecisionAllow},
		tool.Rule{Name: "sandbox", When: `tool_name.endsWith(".sandbox")`, Decision: tool.DecisionAllow},
		tool.Rule{Name: "interns", When: `agent_id in ["intern-1", "intern-2"]`, Decision: tool.DecisionBlock},
	)
	small := args(t, `{"amount": 10, "to": "bob"}`)
	cases := []struct {
		in             tool.Input
		decision, rule string
	}{
		{tool.Input{Args: small, UserID: "ops-ann", AgentID: "intern-1"}, tool.DecisionAllow, "ops-user"},
		{tool.Input{Args: small, UserID: "u1", AgentID: "treasury"}, tool.DecisionAllow, "treasury"},
		{tool.Input{Args: args(t, `{"amount": 20000}`), UserID: "u1", AgentID: "treasury"}, tool.DecisionRequireApproval, tool.RuleDefault},
		{tool.Input{Args: small, UserID: "u1", AgentID: "intern-2"}, tool.DecisionBlock, "interns"},
		{tool.Input{Args: small, UserID: "u1", AgentID: "a", ToolName: "payments.sandbox"}, tool.DecisionAllow, "sandbox"},
		// tool_name defaults to the tool's own name.
		{tool.Input{Args: small, UserID: "u1", AgentID: "a"}, tool.DecisionRequireApproval, tool.RuleDefault},
	}
	for _, tc := range cases {
		got := decide(t, tl, tc.in)
		if got.Decision != tc.decision || got.Rule != tc.rule {
			t.Errorf("%+v: got %s by %s, want %s by %s", tc.in, got.Decision, got.Rule, tc.decision, tc.rule)
		}
	}
	tn := withRules(t, tool.DecisionAllow, tool.Rule{When: `tool_name == "payments.transfer"`, Decision: tool.DecisionBlock})
	if got := decide(t, tn, tool.Input{}); got.Decision != tool.DecisionBlock {
		t.Errorf("tool_name default: got %+v", got)
	}
}

func TestDecideHasGuard(t *testing.T) {
	tl := withRules(t, tool.DecisionAllow,
		tool.Rule{Name: "refund", When: `has(args.memo) && args.memo.contains("refund")`, Decision: tool.DecisionRequireApproval})
	if got := decide(t, tl, tool.Input{Args: args(t, `{"amount": 1, "to": "b", "memo": "a refund"}`)}); got.Rule != "refund" {
		t.Errorf("memo present: got %+v", got)
	}
	got := decide(t, tl, tool.Input{Args: args(t, `{"amount": 1, "to": "b"}`)})
	if got.Rule != tool.RuleDefault || len(got.Errors) != 0 {
		t.Errorf("memo absent: got %+v, want default with no errors (has() guards)", got)
	}
	// Calls without args (nil map) still evaluate has().
	if got := decide(t, tl, tool.Input{}); got.Rule != tool.RuleDefault || len(got.Errors) != 0 {
		t.Errorf("nil args: got %+v", got)
	}
}

func TestDecideRuntimeErrorDoesNotMatch(t *testing.T) {
	tl := withRules(t, tool.DecisionAllow,
		tool.Rule{Name: "missing", When: "args.missing > 1", Decision: tool.DecisionBlock},
		tool.Rule{Name: "wrong-type", When: "args.to > 1", Decision: tool.DecisionBlock},
		tool.Rule{Name: "large", When: "args.amount > 100", Decision: tool.DecisionRequireApproval},
	)
	got := decide(t, tl, tool.Input{Args: args(t, `{"amount": 500, "to": "bob"}`)})
	if got.Decision != tool.DecisionRequireApproval || got.Rule != "large" {
		t.Errorf("got %s by %s, want require_approval by large", got.Decision, got.Rule)
	}
	if len(got.Errors) != 2 || got.Errors[0].Rule != "missing" || got.Errors[1].Rule != "wrong-type" {
		t.Fatalf("Errors = %+v, want the two failing rules in order", got.Errors)
	}
	if !strings.Contains(got.Errors[0].Message, "no such key") {
		t.Errorf("Errors[0] = %q, want it to say the key is missing", got.Errors[0].Message)
	}
	if !strings.Contains(got.Errors[1].Message, "no such overload") {
		t.Errorf("Errors[1] = %q, want a type mismatch", got.Errors[1].Message)
	}
	// Errors are reported with the default decision too, and survive JSON
	// (they go into the policy_decision event).
	got = decide(t, tl, tool.Input{Args: args(t, `{"amount": 5, "to": "bob"}`)})
	b, _ := json.Marshal(got)
	if got.Rule != tool.RuleDefault || !strings.Contains(string(b), `"errors":[{"rule":"missing"`) {
		t.Errorf("default with errors: %s", b)
	}
}

// A hostile rule is stopped by the cost limit and fails closed. The deadline
// is lifted so that only the cost limit can stop it, however loaded the machine.
func TestDecideCostLimit(t *testing.T) {
	defer tool.SetDecideTimeout(time.Hour)()
	list := func(n int) []any {
		items := make([]any, n)
		for i := range items {
			items[i] = float64(i)
		}
		return items
	}
	ten := "[0,1,2,3,4,5,6,7,8,9]"
	cases := []struct {
		name string
		when string
		args map[string]any
	}{
		{"nested comprehensions over args", "args.items.all(x, args.items.all(y, x + y >= 0.0))",
			map[string]any{"items": list(3000)}},
		{"comprehensions over literals", strings.Repeat(ten+".all(a, ", 7) + "true" + strings.Repeat(")", 7), nil},
		// Without dynCostEstimator this costs ~300 units and allocates 60 MB.
		{"string blow-up", "args.items.map(x, args.s + args.s + args.s).size() > 0",
			map[string]any{"items": list(100), "s": strings.Repeat("x", 200_000)}},
		{"quadratic concatenation", "(args.s + args.s + args.s + args.s + args.s + args.s).size() > 0",
			map[string]any{"s": strings.Repeat("x", 1_000_000)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tl := withRules(t, tool.DecisionAllow,
				tool.Rule{Name: "cheap", When: "false", Decision: tool.DecisionAllow},
				tool.Rule{Name: "hostile", When: tc.when, Decision: tool.DecisionAllow})
			start := time.Now()
			got, err := tl.Decide(tool.Input{Args: tc.args})
			elapsed := time.Since(start)
			if err == nil {
				t.Fatalf("Decide finished without error: %+v", got)
			}
			if !strings.Contains(err.Error(), "cost limit") {
				t.Errorf("err = %v, want a cost limit error", err)
			}
			if got.Decision != tool.DecisionBlock || got.Rule != "hostile" || got.Expr != tc.when || len(got.Errors) != 1 {
				t.Errorf("Decision = %+v, want block by hostile with its error", got)
			}
			if elapsed > 30*time.Second {
				t.Errorf("took %v to reach the cost limit", elapsed)
			}
			t.Logf("stopped after %v: %v", elapsed, err)
		})
	}
}

// Past the deadline a comprehension is cut short. Where that could change the
// outcome the rule fails closed; where CEL's logic makes the outcome
// independent of it (`… || true`), or where the rule has no comprehension to
// cut, the result stands, so a slow scheduler alone does not block calls.
func TestDecideDeadline(t *testing.T) {
	items := make([]any, 200_000)
	for i := range items {
		items[i] = float64(i)
	}
	in := tool.Input{Args: map[string]any{"items": items, "to": "bob", "amount": 5.0}}

	t.Run("long comprehension is stopped", func(t *testing.T) {
		defer tool.SetDecideTimeout(10 * time.Millisecond)()
		when := `args.items.exists(y, y < 0.0) || args.to == "mallory"`
		tl := withRules(t, tool.DecisionAllow, tool.Rule{Name: "slow", When: when, Decision: tool.DecisionAllow})
		start := time.Now()
		got, err := tl.Decide(in)
		if err == nil || !strings.Contains(err.Error(), "took longer than 10ms") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the deadline", err)
		}
		if got.Decision != tool.DecisionBlock || got.Rule != "slow" || len(got.Errors) != 1 {
			t.Errorf("Decision = %+v, want block by slow", got)
		}
		t.Logf("stopped after %v", time.Since(start))
	})

	// An expired deadline makes every comprehension stop at its first step.
	defer tool.SetDecideTimeout(0)()
	cases := []struct {
		name, when, decision, rule string
		err                        bool
	}{
		{"outcome decided by the other operand", `args.items.exists(y, y < 0.0) || args.to == "bob"`, tool.DecisionRequireApproval, "r", false},
		{"no comprehension", `args.amount > 1`, tool.DecisionRequireApproval, "r", false},
		{"no comprehension, false", `args.amount > 10`, tool.DecisionAllow, tool.RuleDefault, false},
		{"interrupted result", `args.items.exists(y, y < 0.0)`, tool.DecisionBlock, "r", true},
		// "no such key" and an interruption look alike past the deadline.
		{"any error past the deadline", `args.missing > 1`, tool.DecisionBlock, "r", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tl := withRules(t, tool.DecisionAllow, tool.Rule{Name: "r", When: tc.when, Decision: tool.DecisionRequireApproval})
			got, err := tl.Decide(in)
			if (err != nil) != tc.err || got.Decision != tc.decision || got.Rule != tc.rule {
				t.Errorf("got %+v, %v; want %s by %s (error %v)", got, err, tc.decision, tc.rule, tc.err)
			}
		})
	}
}

// The lead's run manager calls one *Tool from many goroutines; run under -race.
func TestToolConcurrentUse(t *testing.T) {
	// A rule that errors ("missing") fails closed once the deadline has
	// passed; on a loaded machine under -race that could happen here.
	defer tool.SetDecideTimeout(time.Hour)()
	tl := withRules(t, tool.DecisionAllow,
		tool.Rule{Name: "missing", When: "args.nope > 1", Decision: tool.DecisionBlock},
		tool.Rule{Name: "large", When: "args.amount > 100", Decision: tool.DecisionRequireApproval})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				amount := g*100 + i
				raw := json.RawMessage(fmt.Sprintf(`{"amount": %d, "to": "bob"}`, amount+1))
				if err := tl.ValidateArgs(raw); err != nil {
					t.Errorf("ValidateArgs: %v", err)
					return
				}
				m, _ := tool.DecodeArgs(raw)
				got, err := tl.Decide(tool.Input{Args: m, AgentID: "a"})
				want := tool.DecisionAllow
				if amount+1 > 100 {
					want = tool.DecisionRequireApproval
				}
				if err != nil || got.Decision != want || len(got.Errors) != 1 {
					t.Errorf("amount %d: got %+v, %v; want %s", amount+1, got, err, want)
					return
				}
				_ = tl.ArgsSummary(raw)
				_ = tl.OpenAISchema()
			}
		})
	}
	wg.Wait()
}

func BenchmarkDecide(b *testing.B) {
	d := transferDef()
	d.Policy.Rules = []tool.Rule{
		{When: `args.to in ["mallory", "eve"]`, Decision: tool.DecisionBlock},
		{When: `agent_id == "treasury" && args.amount <= 10000`, Decision: tool.DecisionAllow},
		{When: `args.amount > 100`, Decision: tool.DecisionRequireApproval},
		{When: `has(args.tags) && args.tags.exists(t, t == "urgent")`, Decision: tool.DecisionRequireApproval},
	}
	tl := mustCompile(b, d)
	m, _ := tool.DecodeArgs(json.RawMessage(`{"amount": 50, "to": "bob", "tags": ["a", "b", "c"]}`))
	for b.Loop() {
		if _, err := tl.Decide(tool.Input{Args: m, AgentID: "assistant", UserID: "u1"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	d := transferDef()
	d.Policy.Rules = []tool.Rule{
		{When: `args.to in ["mallory", "eve"]`, Decision: tool.DecisionBlock},
		{When: `args.amount > 100`, Decision: tool.DecisionRequireApproval},
	}
	for b.Loop() {
		if _, err := tool.Compile(d); err != nil {
			b.Fatal(err)
		}
	}
}

// A rule's error message is built from the values it evaluated; where the
// tool redacts an argument, its value never shows in the recorded errors
// (they go into the policy_decision event) nor in Decide's error (logged).
func TestDecideErrorsNeverShowRedactedValues(t *testing.T) {
	d := transferDef()
	d.Redact = []string{"card.number", "card.cvv", "pins.*"}
	d.Policy = tool.Policy{Decision: tool.DecisionAllow, Rules: []tool.Rule{
		{Name: "regexp", When: `"abc".matches(args.card.number)`, Decision: tool.DecisionBlock},
		{Name: "key", When: `args.card[args.card.number] == 1`, Decision: tool.DecisionBlock},
		{Name: "short", When: `args.card[args.pins[0]] == 1`, Decision: tool.DecisionBlock},
		{Name: "plain", When: `args.card[args.to] == 1`, Decision: tool.DecisionBlock},
		// A regexp error quotes only the fragment it choked on.
		{Name: "fragment", When: `"abc".matches(args.card.cvv)`, Decision: tool.DecisionBlock},
	}}
	tl := mustCompile(t, d)
	got := decide(t, tl, tool.Input{Args: args(t, `{"amount": 5, "to": "bob", "card": {"number": "SEC(RET 4111", "cvv": "4111-2222-3333-[9876"}, "pins": ["77"]}`)})
	if len(got.Errors) != 5 {
		t.Fatalf("Errors = %+v, want five failing rules", got.Errors)
	}
	b, _ := json.Marshal(got.Errors)
	for _, secret := range []string{"SEC(RET", "4111", "77", "9876"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("errors show the redacted %q: %s", secret, b)
		}
	}
	if m := got.Errors[0].Message; !strings.Contains(m, "[redacted]") || !strings.Contains(m, "regexp") {
		t.Errorf("regexp rule's error %q: want the message with the value replaced", m)
	}
	if m := got.Errors[1].Message; !strings.Contains(m, "no such key: [redacted]") {
		t.Errorf("key rule's error %q, want the value replaced", m)
	}
	if m := got.Errors[2].Message; strings.Contains(m, "no such key") {
		t.Errorf("short value's error %q: a value too short to replace safely withholds the message", m)
	}
	if m := got.Errors[3].Message; !strings.Contains(m, "no such key: bob") {
		t.Errorf("unredacted value's error %q, want it as CEL wrote it", m)
	}
}
