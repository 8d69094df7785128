package jsonstr

import (
	"bytes"
	"encoding/json"
	"testing"
)

func checkSameAsJSON(t *testing.T, s string) {
	t.Helper()
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := Append([]byte("x"), s); !bytes.Equal(got, append([]byte("x"), want...)) {
		t.Fatalf("Append(%q) = %s, encoding/json %s", s, got[1:], want)
	}
}

var samples = []string{
	"", "run_019ac4e3", "Sunny ", "晴天，27°C", `a"b`, `back\slash`, "line\nbreak", "tab\t", "<b>&amp;</b>",
	"bad \xff utf8", "sep\u2028arator", "para\u2029graph", "emoji 🙂", "\x7f del",
}

// TestAppend: what Append writes is what encoding/json writes, for the
// strings it copies and the ones it hands over.
func TestAppend(t *testing.T) {
	for _, s := range samples {
		checkSameAsJSON(t, s)
	}
	if !Plain("晴天，27°C") || Plain(`a"b`) || Plain("bad \xff") {
		t.Error("Plain misjudges a plain or an escaped string")
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range samples {
		f.Add(s)
	}
	f.Fuzz(checkSameAsJSON)
}
