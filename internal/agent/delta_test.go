package agent

import (
	"encoding/json"
	"testing"
)

// deltaSamples are delta data in the plain form and around it: what the
// fast path takes must decode to the same text through encoding/json, and
// what it leaves must still decode (or fail) as before.
var deltaSamples = []struct {
	data  string
	plain bool
	text  string
}{
	{`{"text":"Sunny "}`, true, "Sunny "},
	{` { "text" : "in Paris" } `, true, "in Paris"},
	{"{\"text\":\"晴天，27°C\"}", true, "晴天，27°C"},
	{`{"text":""}`, true, ""},
	{`{"text":"a\"b"}`, false, `a"b`},
	{`{"text":"line\nbreak"}`, false, "line\nbreak"},
	{`{"text":"\u00e9"}`, false, "é"},
	{"{\"text\":\"tab\there\"}", false, ""},     // a raw control character: invalid JSON
	{"{\"text\":\"bad \xff utf8\"}", false, ""}, // encoding/json replaces it with U+FFFD
	{`{"text":"x","extra":1}`, false, "x"},
	{`{"TEXT":"x"}`, false, "x"},
	{`{"text":"x"} trailing`, false, ""},
	{`{"text":"x"`, false, ""},
	{`{"text":5}`, false, ""},
	{`null`, false, ""},
	{``, false, ""},
}

func TestPlainDeltaText(t *testing.T) {
	for _, s := range deltaSamples {
		text, ok := plainDeltaText(s.data)
		if ok != s.plain {
			t.Errorf("plainDeltaText(%q): ok %v, want %v", s.data, ok, s.plain)
			continue
		}
		if ok && text != s.text {
			t.Errorf("plainDeltaText(%q) = %q, want %q", s.data, text, s.text)
		}
		checkSameAsJSON(t, s.data)
	}
}

// TestDecodeDeltaEvent: both paths give the handler the same event.
func TestDecodeDeltaEvent(t *testing.T) {
	for _, data := range []string{`{"text":"Sunny "}`, `{"text":"a\"b"}`, `{"text":"x","extra":1}`} {
		se, res, err := decodeEvent(SSEEvent{Event: "delta", Data: data})
		if err != nil || res != nil || se == nil {
			t.Fatalf("decodeEvent(%q) = %v, %v, %v", data, se, res, err)
		}
		var want struct{ Text string }
		if err := json.Unmarshal([]byte(data), &want); err != nil {
			t.Fatal(err)
		}
		if se.Type != "delta" || se.Text != want.Text {
			t.Errorf("decodeEvent(%q) = %+v, want text %q", data, *se, want.Text)
		}
	}
	if _, _, err := decodeEvent(SSEEvent{Event: "delta", Data: `{"text":"x"`}); err == nil {
		t.Error("a truncated delta decoded without a protocol error")
	}
}

// checkSameAsJSON fails when the fast path accepts data that encoding/json
// decodes to another text, or rejects.
func checkSameAsJSON(t *testing.T, data string) {
	t.Helper()
	text, ok := plainDeltaText(data)
	if !ok {
		return
	}
	var d struct {
		Text string `json:"text"`
	}
	if err := decodeObject(data, &d); err != nil {
		t.Fatalf("plainDeltaText accepted %q, which encoding/json rejects: %v", data, err)
	}
	if d.Text != text {
		t.Fatalf("plainDeltaText(%q) = %q, encoding/json %q", data, text, d.Text)
	}
}

func FuzzPlainDeltaText(f *testing.F) {
	for _, s := range deltaSamples {
		f.Add(s.data)
	}
	f.Fuzz(checkSameAsJSON)
}
