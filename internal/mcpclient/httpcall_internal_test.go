package mcpclient

import (
	"io"
	"strings"
	"testing"
)

// The event streams servers write, as the SSE specification reads them:
// only message events with data are returned.
func TestEventReader(t *testing.T) {
	long := strings.Repeat("x", 10000)
	for _, tc := range []struct {
		name, stream string
		want         []string
	}{
		// The TypeScript SDK's server primes a stream with an id and an
		// empty data line (SEP-1699).
		{"typescript priming", "id: a1\ndata: \n\nevent: message\nid: a2\ndata: {\"id\":1}\n\n", []string{`{"id":1}`}},
		// The go-sdk's, with an event named "prime" and no data.
		{"go-sdk priming", "event: prime\nid: 0_0\n\nevent: message\nid: 0_1\ndata: {\"id\":1}\n\n", []string{`{"id":1}`}},
		{"crlf and comments", ": hello\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata:{}\r\n\r\n", []string{"{\"a\":\n1}", "{}"}},
		{"other events", "event: ping\ndata: x\n\ndata: y\n\n", []string{"y"}},
		{"a line longer than the buffer", "data: " + long + "\n\ndata: z\n\n", []string{long, "z"}},
		{"no blank line at the end", "data: last", []string{"last"}},
		{"retry and unknown fields", "retry: 10\nfoo: bar\ndata: d\n\n", []string{"d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newEventReader(strings.NewReader(tc.stream))
			defer r.release()
			var got []string
			for {
				data, err := r.next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(data))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
