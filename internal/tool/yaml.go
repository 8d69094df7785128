package tool

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxYAMLNodes bounds the nodes visited while converting parameters. YAML
// aliases can make a small document expand exponentially ("billion laughs");
// yaml.v3 guards its own Decode, but our walk over the node tree must too.
const maxYAMLNodes = 100_000

// The keys each level of a YAML tool accepts, read from the yaml tags so they
// cannot drift from the structs.
var (
	definitionKeys = yamlKeys(reflect.TypeFor[Definition](), "parameters")
	policyKeys     = yamlKeys(reflect.TypeFor[Policy]())
	ruleKeys       = yamlKeys(reflect.TypeFor[Rule]())
)

// yamlDefinition decodes the fields of Definition that yaml.v3 maps itself,
// without recursing into Definition.UnmarshalYAML.
type yamlDefinition Definition

// UnmarshalYAML lets a config file declare tools as YAML; see DefinitionFromYAML.
func (d *Definition) UnmarshalYAML(node *yaml.Node) error {
	def, err := DefinitionFromYAML(node)
	if err != nil {
		return err
	}
	*d = def
	return nil
}

// DefinitionFromYAML decodes one tool from the config file. It takes the same
// fields as the JSON form; parameters is written as a YAML map and becomes
// the JSON Schema. Unknown fields are refused at every level (a misspelt
// "decison:" would otherwise silently leave the tool on "allow"). Errors are
// *ValidationError carrying the YAML line. The result still needs Compile.
//
// Example:
//
//	tool_name: payments.transfer
//	kind: server
//	endpoint: http://payments.internal/transfer
//	parameters:
//	  type: object
//	  required: [amount, to]
//	  properties:
//	    amount: {type: number, minimum: 0}
//	    to: {type: string}
//	policy:
//	  decision: allow
//	  rules:
//	    - name: large
//	      when: args.amount > 100
//	      decision: require_approval
func DefinitionFromYAML(node *yaml.Node) (Definition, error) {
	node = yamlTarget(node)
	if node == nil || node.Kind != yaml.MappingNode {
		line := 0
		if node != nil {
			line = node.Line
		}
		return Definition{}, &ValidationError{Message: fmt.Sprintf("a tool must be a YAML mapping (line %d)", line)}
	}
	if err := checkYAMLKeys(node, "", definitionKeys); err != nil {
		return Definition{}, err
	}
	if p := yamlTarget(yamlField(node, "policy")); p != nil && p.Kind == yaml.MappingNode {
		if err := checkYAMLKeys(p, "policy.", policyKeys); err != nil {
			return Definition{}, err
		}
		if rules := yamlTarget(yamlField(p, "rules")); rules != nil && rules.Kind == yaml.SequenceNode {
			for i, r := range rules.Content {
				if r = yamlTarget(r); r.Kind == yaml.MappingNode {
					if err := checkYAMLKeys(r, fmt.Sprintf("policy.rules[%d].", i), ruleKeys); err != nil {
						return Definition{}, err
					}
				}
			}
		}
	}

	// yaml.v3 truncates a float written into an integer field (timeout_ms:
	// 0.5 would be 0, the default): such a value is refused instead.
	for _, key := range []string{"timeout_ms", "approval_timeout_ms"} {
		if v := yamlTarget(yamlField(node, key)); v != nil && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!float" {
			var f float64
			if err := v.Decode(&f); err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
				return Definition{}, invalid(key, nil, "must be a whole number of milliseconds, got %s (line %d)", v.Value, v.Line)
			}
		}
	}
	var d Definition
	if err := node.Decode((*yamlDefinition)(&d)); err != nil {
		return Definition{}, &ValidationError{Message: err.Error(), Err: err}
	}
	if p := yamlField(node, "parameters"); p != nil {
		budget := maxYAMLNodes
		v, err := yamlToJSON(p, &budget)
		if err != nil {
			return Definition{}, invalid("parameters", err, "%v", err)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return Definition{}, invalid("parameters", err, "cannot be converted to JSON (line %d): %v", p.Line, err)
		}
		d.Parameters = raw
	}
	return d, nil
}

// yamlTarget unwraps a document node and follows an alias.
func yamlTarget(n *yaml.Node) *yaml.Node {
	for n != nil {
		switch {
		case n.Kind == yaml.DocumentNode && len(n.Content) == 1:
			n = n.Content[0]
		case n.Kind == yaml.AliasNode:
			n = n.Alias
		default:
			return n
		}
	}
	return nil
}

// yamlField returns the value of key in a mapping node, or nil.
func yamlField(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// checkYAMLKeys refuses keys of a mapping that are not in known.
func checkYAMLKeys(m *yaml.Node, prefix string, known []string) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.Value == "<<" {
			return &ValidationError{Field: prefix + "<<", Message: fmt.Sprintf("merge keys are not supported (line %d)", k.Line)}
		}
		if !slices.Contains(known, k.Value) {
			return &ValidationError{Field: prefix + k.Value, Message: fmt.Sprintf("unknown field (line %d); known fields: %s", k.Line, strings.Join(known, ", "))}
		}
	}
	return nil
}

// yamlToJSON converts a YAML node to the value encoding/json would decode
// from the equivalent JSON, so a schema written in YAML means what it says:
// numbers stay numbers, and YAML-only scalars (timestamps, binary, custom
// tags) become the strings they were written as rather than Go values that
// would marshal into something else.
func yamlToJSON(n *yaml.Node, budget *int) (any, error) {
	*budget--
	if *budget < 0 {
		return nil, fmt.Errorf("is too large or has too many aliases (more than %d nodes)", maxYAMLNodes)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return yamlToJSON(n.Content[0], budget)
	case yaml.AliasNode:
		return yamlToJSON(n.Alias, budget)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := yamlTarget(n.Content[i])
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("has a non-scalar mapping key (line %d)", n.Content[i].Line)
			}
			if k.Value == "<<" && k.ShortTag() == "!!merge" {
				return nil, fmt.Errorf("uses a merge key, which is not supported (line %d)", k.Line)
			}
			v, err := yamlToJSON(n.Content[i+1], budget)
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := yamlToJSON(e, budget)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
		}
		return s, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool", "!!int", "!!float":
			var v any
			if err := n.Decode(&v); err != nil {
				return nil, fmt.Errorf("has a bad scalar %q (line %d): %w", n.Value, n.Line, err)
			}
			if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
				return nil, fmt.Errorf("has %q, which JSON cannot represent (line %d)", n.Value, n.Line)
			}
			return v, nil
		default:
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("has an unsupported YAML node (line %d)", n.Line)
}

// yamlKeys lists the yaml names of t's fields plus extra.
func yamlKeys(t reflect.Type, extra ...string) []string {
	keys := slices.Clone(extra)
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	return keys
}
