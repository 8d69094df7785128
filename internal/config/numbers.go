package config

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// checkNumbers refuses numbers the YAML decoder would quietly bend: yaml.v3
// stores a float in an int field by truncating it (max_active_runs: 0.5
// became 0, no cap; 1.9 became 1), and takes .nan and .inf for float
// fields, where NaN slips past every comparison (a rate of NaN was a limit
// switched off). It walks the file's nodes along the Go type they decode
// into, so every integer and float setting is checked, those added later
// too, and names the key of each bad value. A scalar of another type (a
// string where a number goes) is left to the decoder, which refuses it.
func checkNumbers(root *yaml.Node) []error {
	w := numberWalk{budget: maxNumberNodes}
	w.walk(root, reflect.TypeFor[File](), "", 0)
	return w.errs
}

// Bounds of the walk. The File type is a few levels deep, and aliases and
// merge keys can make a small file a huge tree ("billion laughs"); past the
// budget the walk stops, and yaml.v3's typed decode refuses such a file
// itself.
const (
	maxNumberDepth = 16
	maxNumberNodes = 100_000
)

type numberWalk struct {
	errs   []error
	budget int
}

func (w *numberWalk) walk(n *yaml.Node, t reflect.Type, key string, depth int) {
	w.budget--
	if n == nil || depth > maxNumberDepth || w.budget < 0 {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			w.walk(c, t, key, depth+1)
		}
		return
	case yaml.AliasNode:
		w.walk(n.Alias, t, key, depth+1)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if t == reflect.TypeFor[yaml.Node]() || n.Kind != yaml.MappingNode {
			return // a section another package decodes, or the decoder's error
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // a merge: its mappings' keys are this one's
				if v.Kind == yaml.SequenceNode {
					for _, m := range v.Content {
						w.walk(m, t, key, depth+1)
					}
				} else {
					w.walk(v, t, key, depth+1)
				}
				continue
			}
			if f, ok := yamlField(t, k.Value); ok {
				w.walk(v, f.Type, join(key, k.Value), depth+1)
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			w.walk(n.Content[i+1], t.Elem(), join(key, n.Content[i].Value), depth+1)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, c := range n.Content {
			w.walk(c, t.Elem(), fmt.Sprintf("%s[%d]", key, i), depth+1)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if t == reflect.TypeFor[time.Duration]() {
			return // written as "1m"; yaml.v3 refuses a bare number there
		}
		if f, ok := floatScalar(n); ok && (f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64) {
			w.errs = append(w.errs, fmt.Errorf("%s must be a whole number, got %s (line %d)", key, n.Value, n.Line))
		}
	case reflect.Float32, reflect.Float64:
		if f, ok := floatScalar(n); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			w.errs = append(w.errs, fmt.Errorf("%s must be a finite number, got %s (line %d)", key, n.Value, n.Line))
		}
	}
}

// floatScalar is a scalar that YAML resolves to a float (1.5, 1e3, .nan,
// .inf), and its value.
func floatScalar(n *yaml.Node) (float64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!float" {
		return 0, false
	}
	var f float64
	if err := n.Decode(&f); err != nil {
		return 0, false
	}
	return f, true
}

// yamlField finds the field of struct t that the YAML key decodes into.
func yamlField(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key && f.IsExported() {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// join names a key below its section the way the other errors of the file
// do ("limits: max_active_runs", "retention: agents: ag1").
func join(key, sub string) string {
	if key == "" {
		return sub
	}
	if strings.HasSuffix(key, "]") {
		return key + "." + sub
	}
	return key + ": " + sub
}
