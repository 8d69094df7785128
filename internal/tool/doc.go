// Package tool defines tools and decides, for each call, what their policy
// says (DESIGN §6–§8, issue 4 items 1–2).
//
// A Definition is what an administrator registers (PUT /v1/tools/{tool_name}
// or the config file); the tools of MCP servers are built from what the
// server lists, its defaults and an optional override (mcp.go). Compile checks it completely, fills its defaults in
// and returns a *Tool whose JSON Schema and CEL rules are compiled, so that an
// invalid schema or expression is refused at registration and never
// discovered at call time. A *Tool then:
//
//   - validates a call's args against the schema (ValidateArgs → *ArgsError,
//     answered as 400 invalid_args);
//   - decides allow / require_approval / block (Decide), returning the rule
//     that matched for the policy_decision event;
//   - renders itself as an OpenAI function-calling tool (OpenAISchema), with
//     "." in names mapped to "__" and the "@" of an MCP server's tool
//     "{server}@{tool}" to "--" (FunctionName, ToolNameFromFunction);
//   - summarises a call for an approval prompt (ArgsSummary).
//
// # Policy
//
// A policy is a default decision plus rules tried in order; the first rule
// whose `when` is true decides, and when none is, the default does. `when` is
// a CEL expression (https://cel.dev) of type bool over:
//
//	args       map(string, dyn)  the call's args (JSON numbers are doubles)
//	agent_id   string            the calling agent
//	user_id    string            the user of the run's session
//	tool_name  string            the tool's name
//
// Example, in the config file:
//
//	tools:
//	  - tool_name: payments.transfer
//	    kind: server
//	    endpoint: http://payments.internal/transfer
//	    description: Move money between accounts.
//	    parameters:
//	      type: object
//	      required: [amount, to]
//	      additionalProperties: false
//	      properties:
//	        amount: {type: number, exclusiveMinimum: 0}
//	        to: {type: string}
//	        memo: {type: string}
//	    policy:
//	      decision: allow
//	      rules:
//	        - name: sanctioned
//	          when: args.to in ["mallory", "eve"]
//	          decision: block
//	        - name: trusted-agent
//	          when: agent_id == "treasury" && args.amount <= 10000
//	          decision: allow
//	        - name: large
//	          when: args.amount > 100
//	          decision: require_approval
//	        - name: memo-mentions-refund
//	          when: has(args.memo) && args.memo.contains("refund")
//	          decision: require_approval
//
// A transfer of 50 to bob is allowed by the default; 150 needs an approval
// unless the treasury agent asks; anything to mallory is blocked whoever asks.
//
// A rule that fails at call time (for example `args.memo.contains(…)` when
// memo is absent) does not match and is reported in Decision.Errors, so guard
// optional fields with has(). Every rule is limited to RuleCostLimit units of
// CEL work per call and a whole decision to DecideTimeout; a rule stopped by
// either makes Decide return an error with a block decision (fail closed).
//
// # Concurrency
//
// A *Tool is immutable and safe for concurrent use. The CEL environment is
// built once per process and shared.
package tool
