package tool_test

import (
	"encoding/json"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/internal/tool"
)

// The policy of the package documentation, checked.
func ExampleTool_Decide() {
	const src = `
tool_name: payments.transfer
kind: server
endpoint: http://payments.internal/transfer
description: Move money between accounts.
parameters:
  type: object
  required: [amount, to]
  additionalProperties: false
  properties:
    amount: {type: number, exclusiveMinimum: 0}
    to: {type: string}
    memo: {type: string}
policy:
  decision: allow
  rules:
    - name: sanctioned
      when: args.to in ["mallory", "eve"]
      decision: block
    - name: trusted-agent
      when: agent_id == "treasury" && args.amount <= 10000
      decision: allow
    - name: large
      when: args.amount > 100
      decision: require_approval
    - name: memo-mentions-refund
      when: has(args.memo) && args.memo.contains("refund")
      decision: require_approval
`
	var def tool.Definition
	if err := yaml.Unmarshal([]byte(src), &def); err != nil {
		panic(err)
	}
	tl, err := tool.Compile(def)
	if err != nil {
		panic(err)
	}
	for _, call := range []struct{ agent, args string }{
		{"assistant", `{"amount": 50, "to": "bob"}`},
		{"assistant", `{"amount": 150, "to": "bob"}`},
		{"treasury", `{"amount": 150, "to": "bob"}`},
		{"treasury", `{"amount": 5, "to": "mallory"}`},
		{"assistant", `{"amount": 5, "to": "bob", "memo": "refund #12"}`},
	} {
		raw := json.RawMessage(call.args)
		if err := tl.ValidateArgs(raw); err != nil {
			panic(err)
		}
		args, _ := tool.DecodeArgs(raw)
		d, err := tl.Decide(tool.Input{Args: args, AgentID: call.agent, UserID: "u1"})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s → %s (%s)\n", call.agent, tl.ArgsSummary(raw), d.Decision, d.Rule)
	}
	// Output:
	// assistant: payments.transfer(amount=50, to="bob") → allow (default)
	// assistant: payments.transfer(amount=150, to="bob") → require_approval (large)
	// treasury: payments.transfer(amount=150, to="bob") → allow (trusted-agent)
	// treasury: payments.transfer(amount=5, to="mallory") → block (sanctioned)
	// assistant: payments.transfer(amount=5, to="bob", memo="refund #12") → require_approval (memo-mentions-refund)
}
