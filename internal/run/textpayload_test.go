package run

import (
	"bytes"
	"encoding/json"
	"testing"
)

func checkTextPayload(t *testing.T, text string) {
	t.Helper()
	want, err := json.Marshal(struct {
		Text string `json:"text"`
	}{text})
	if err != nil {
		t.Fatal(err)
	}
	if got := textPayload(text); !bytes.Equal(got, want) {
		t.Fatalf("textPayload(%q) = %s, encoding/json %s", text, got, want)
	}
}

var textPayloadSamples = []string{
	"", "Sunny ", "晴天，27°C", `a"b`, `back\slash`, "line\nbreak", "tab\t", "<b>&amp;</b>",
	"bad \xff utf8", "sep\u2028arator", "para\u2029graph", "emoji 🙂", "\x7f del",
}

// TestTextPayload: the fast path writes exactly what encoding/json writes,
// for the plain texts it copies and the ones it hands over.
func TestTextPayload(t *testing.T) {
	for _, s := range textPayloadSamples {
		checkTextPayload(t, s)
	}
}

func FuzzTextPayload(f *testing.F) {
	for _, s := range textPayloadSamples {
		f.Add(s)
	}
	f.Fuzz(checkTextPayload)
}
