package sqlstore

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTextCodecRoundTrips(t *testing.T) {
	for _, s := range []string{
		"", "plain", "a\x00b", "\x00", "\xff", "a\xffb\xfe", "\ufdd0", "\ufdd0x", "\ufdd00", "x\ufdd0", "\x00\ufdd0\xff",
		"\ufdd0m", "\ufdd0x41", "日本語\x00", "\xed\xa0\x80", // a surrogate's UTF-8 bytes are invalid
	} {
		e := escapeText(s)
		if strings.IndexByte(e, 0) >= 0 || !utf8.ValidString(e) {
			t.Errorf("escape(%q) = %q still holds a NUL or invalid UTF-8", s, e)
		}
		if got := unescapeText(e); got != s {
			t.Errorf("unescape(escape(%q)) = %q", s, got)
		}
		if got := string(unescapeJSON([]byte(e))); got != s {
			t.Errorf("unescapeJSON(escape(%q)) = %q", s, got)
		}
	}
}

// Ordinary strings (and so existing rows) are stored as they are.
func TestTextCodecLeavesOrdinaryStrings(t *testing.T) {
	for _, s := range []string{"", "ses_0123", `{"a":"\u0000"}`, "x\ufdd0", "emoji 😀"} {
		if e := escapeText(s); e != s {
			t.Errorf("escape(%q) = %q, want it unchanged", s, e)
		}
	}
	// A stored value that merely starts with the mark, not written by the
	// codec, reads back as it is.
	for _, s := range []string{"\ufdd0", "\ufdd0q", "\ufdd0x4", "\ufdd0xzz"} {
		if got := unescapeText(s); got != s {
			t.Errorf("unescape(%q) = %q, want it unchanged", s, got)
		}
	}
}

func FuzzTextCodec(f *testing.F) {
	f.Add("a\x00b\xff\ufdd0")
	f.Fuzz(func(t *testing.T, s string) {
		e := escapeText(s)
		if strings.IndexByte(e, 0) >= 0 || !utf8.ValidString(e) {
			t.Fatalf("escape(%q) = %q", s, e)
		}
		if unescapeText(e) != s {
			t.Fatalf("round trip of %q", s)
		}
	})
}
