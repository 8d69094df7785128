package tool_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/tool"
)

// valid reports whether Compile accepts name (as an MCP tool when it has
// the "{server}@{tool}" form).
func valid(name string) bool {
	kind := tool.KindClient
	if tool.IsMCPName(name) {
		kind = tool.KindMCP
	}
	_, err := tool.Compile(tool.Definition{Name: name, Kind: kind})
	return err == nil
}

func TestMCPFunctionNames(t *testing.T) {
	for name, fn := range map[string]string{
		"srv@echo":              "srv--echo",
		"everything@get-sum":    "everything--get-sum",
		"files@read.text":       "files--read__text",
		"demo_mcp@lookup_order": "demo_mcp--lookup_order",
		"a-b@c--d":              "a-b--c--d",
		"s@-x":                  "s---x",
		"s_1@x._y":              "s_1--x___y",
	} {
		if !valid(name) {
			t.Errorf("%q refused", name)
			continue
		}
		if got := tool.FunctionName(name); got != fn {
			t.Errorf("FunctionName(%q) = %q, want %q", name, got, fn)
		}
		if got := tool.ToolNameFromFunction(fn); got != name {
			t.Errorf("ToolNameFromFunction(%q) = %q, want %q", fn, got, name)
		}
		if got := tool.CanonicalName(fn); got != name {
			t.Errorf("CanonicalName(%q) = %q", fn, got)
		}
	}
}

// The names the mapping could not tell apart are refused, each with a
// message naming the problem.
func TestMCPNamesRefused(t *testing.T) {
	for name, why := range map[string]string{
		"a--b":                         `must not contain "--"`,
		"x.a--b":                       `must not contain "--"`,
		"s-@x":                         "MCP server part",
		"s--t@x":                       "MCP server part",
		"s.t@x":                        "MCP server part",
		"-s@x":                         "MCP server part",
		"@x":                           "MCP server part",
		"s@":                           "MCP tool part",
		"s@a__b":                       "MCP tool part",
		"s@a_.b":                       "MCP tool part",
		"s@a b":                        "MCP tool part",
		"s@x@y":                        "MCP tool part",
		"s@" + strings.Repeat("x", 70): "longer than the 64",
	} {
		kind := tool.KindMCP
		if !tool.IsMCPName(name) {
			kind = tool.KindClient
		}
		_, err := tool.Compile(tool.Definition{Name: name, Kind: kind})
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: err %v, want one mentioning %q", name, err, why)
		}
	}
	// "@" belongs to MCP tools only, and MCP tools are named with it.
	if _, err := tool.Compile(tool.Definition{Name: "s@x", Kind: tool.KindServer, Endpoint: "http://x"}); err == nil {
		t.Error(`a server tool named "s@x" was accepted`)
	}
	if _, err := tool.Compile(tool.Definition{Name: "plain", Kind: tool.KindMCP}); err == nil {
		t.Error(`an MCP tool named "plain" was accepted`)
	}
}

// No two valid names share a function name, across both kinds of names:
// the function names a plain tool can have never contain "--", and an MCP
// tool's always does.
func TestFunctionNameNoCollision(t *testing.T) {
	names := []string{"a.b", "a__b", "a_b", "a-b", "a--b", "a@b", "a@b.c", "a@b__c", "a@b--c", "a-@b", "a@-b",
		"a._b", "a@._b", "a@_b", "a_@b", "a_b@c", "a@b_c", "a@b-c", "a-b@c", "ab@c", "a@bc", "x.y.z", "x@y.z", "x@y@z"}
	seen := map[string]string{}
	for _, n := range names {
		if !valid(n) {
			continue
		}
		fn := tool.FunctionName(n)
		if other, ok := seen[fn]; ok {
			t.Fatalf("%q and %q both map to %q", other, n, fn)
		}
		seen[fn] = n
	}
	if len(seen) < 12 {
		t.Fatalf("only %d of the names were valid: %v", len(seen), seen)
	}
}

// Any two valid names with the same function name are the same name.
func FuzzFunctionNameNoCollision(f *testing.F) {
	f.Add("a.b", "a__b")
	f.Add("a@b", "a--b")
	f.Add("a-@b", "a@-b")
	f.Add("a@b.c", "a@b__c")
	f.Add("a@b--c", "a-b@c")
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == b || tool.FunctionName(a) != tool.FunctionName(b) {
			return
		}
		if valid(a) && valid(b) {
			t.Fatalf("valid names %q and %q share the function name %q", a, b, tool.FunctionName(a))
		}
	})
}

// Every function name that maps to a valid name is that name's function
// name: the mapping is a bijection between valid names and the function
// names a model can be offered.
func FuzzToolNameFromFunction(f *testing.F) {
	for _, s := range []string{"a__b", "a--b", "a---b", "a----b", "s--x___y", "__", "--", "a-b--c--d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, fn string) {
		if !openAIName.MatchString(fn) {
			return
		}
		name := tool.ToolNameFromFunction(fn)
		if valid(name) && tool.FunctionName(name) != fn {
			t.Fatalf("%q → %q → %q", fn, name, tool.FunctionName(name))
		}
	})
}

func TestMCPDefinitionOverride(t *testing.T) {
	defaults := tool.MCPDefaults{
		Policy:    tool.Policy{Decision: tool.DecisionRequireApproval, Rules: []tool.Rule{{Name: "small", When: "args.n < 10", Decision: tool.DecisionAllow}}},
		TimeoutMS: 5000, Agents: []string{"a1"},
	}
	listed := tool.MCPListedTool{Name: "get-sum", Description: "Adds.", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"}}}`)}

	d := tool.MCPDefinition("srv", defaults, listed, nil)
	tl, err := tool.Compile(d)
	if err != nil {
		t.Fatal(err)
	}
	if tl.Def.Name != "srv@get-sum" || tl.Def.Kind != tool.KindMCP || tl.Def.Description != "Adds." || tl.Def.TimeoutMS != 5000 ||
		tl.Def.Policy.Decision != tool.DecisionRequireApproval || len(tl.Def.Policy.Rules) != 1 || !tl.AllowsAgent("a1") || tl.AllowsAgent("a2") {
		t.Fatalf("defaults: %+v", tl.Def)
	}

	// An override with only a description keeps the server's policy: a
	// tool's policy is never weakened by leaving it out.
	o, err := tool.CheckMCPOverride(tool.Definition{Name: "srv@get-sum", Description: "Adds two numbers."})
	if err != nil {
		t.Fatal(err)
	}
	tl, err = tool.Compile(tool.MCPDefinition("srv", defaults, listed, &o))
	if err != nil {
		t.Fatal(err)
	}
	if tl.Def.Description != "Adds two numbers." || tl.Def.Policy.Decision != tool.DecisionRequireApproval || len(tl.Def.Policy.Rules) != 1 {
		t.Fatalf("description override: %+v", tl.Def)
	}

	// A policy with a decision replaces the server's as a whole.
	o, err = tool.CheckMCPOverride(tool.Definition{Name: "srv@get-sum", Kind: tool.KindMCP, Policy: tool.Policy{Decision: tool.DecisionBlock}, TimeoutMS: 100, Agents: []string{"a2"}})
	if err != nil {
		t.Fatal(err)
	}
	tl, err = tool.Compile(tool.MCPDefinition("srv", defaults, listed, &o))
	if err != nil {
		t.Fatal(err)
	}
	if tl.Def.Policy.Decision != tool.DecisionBlock || len(tl.Def.Policy.Rules) != 0 || tl.Def.TimeoutMS != 100 || tl.AllowsAgent("a1") || !tl.AllowsAgent("a2") {
		t.Fatalf("policy override: %+v", tl.Def)
	}

	for _, bad := range []tool.Definition{
		{Name: "srv@get-sum", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "srv@get-sum", Policy: tool.Policy{Rules: []tool.Rule{{When: "true", Decision: "block"}}}},
		{Name: "srv@get-sum", Kind: tool.KindServer},
		{Name: "srv@get-sum", Endpoint: "http://x"},
		{Name: "srv@get-sum", Policy: tool.Policy{Decision: "allow", Rules: []tool.Rule{{When: "args.", Decision: "block"}}}},
		{Name: "srv@get-sum", TimeoutMS: -1},
	} {
		if _, err := tool.CheckMCPOverride(bad); err == nil {
			t.Errorf("override %+v accepted", bad)
		}
	}

	// A long description from a server is cut, not refused.
	listed.Description = strings.Repeat("é", tool.MaxDescriptionLen)
	tl, err = tool.Compile(tool.MCPDefinition("srv", defaults, listed, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Def.Description) > tool.MaxDescriptionLen || !strings.HasSuffix(tl.Def.Description, "…") {
		t.Fatalf("description of %d bytes", len(tl.Def.Description))
	}
}
