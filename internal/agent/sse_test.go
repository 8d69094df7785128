package agent

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// readAll collects events until an error and returns that error.
func readAll(t testing.TB, r io.Reader, max int) ([]SSEEvent, error) {
	t.Helper()
	sr := NewSSEReader(r, max)
	var evs []SSEEvent
	for {
		ev, err := sr.Next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestSSEReaderSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []SSEEvent
	}{
		{"simple", "event: delta\ndata: {\"text\":\"hi\"}\n\n",
			[]SSEEvent{{Event: "delta", Data: `{"text":"hi"}`}}},
		{"multi-line data joined with LF", "data: a\ndata: b\ndata:\ndata: c\n\n",
			[]SSEEvent{{Data: "a\nb\n\nc"}}},
		{"CRLF", "event: x\r\ndata: 1\r\ndata: 2\r\n\r\n",
			[]SSEEvent{{Event: "x", Data: "1\n2"}}},
		{"CR only", "event: x\rdata: 1\r\rdata: 2\r\r",
			[]SSEEvent{{Event: "x", Data: "1"}, {Data: "2"}}},
		{"mixed endings", "data: a\r\ndata: b\rdata: c\n\r\n",
			[]SSEEvent{{Data: "a\nb\nc"}}},
		{"comments ignored", ": keep-alive\n:\ndata: a\n: inside\ndata: b\n\n",
			[]SSEEvent{{Data: "a\nb"}}},
		{"only one space stripped", "data:no space\ndata:  two\n\n",
			[]SSEEvent{{Data: "no space\n two"}}},
		{"field without colon", "data\ndata\n\n",
			[]SSEEvent{{Data: "\n"}}},
		{"empty data dispatches", "event: done\ndata:\n\n",
			[]SSEEvent{{Event: "done", Data: ""}}},
		{"no data: not dispatched, type reset", "event: done\n\ndata: x\n\n",
			[]SSEEvent{{Data: "x"}}},
		{"type resets after dispatch", "event: a\ndata: 1\n\ndata: 2\n\n",
			[]SSEEvent{{Event: "a", Data: "1"}, {Data: "2"}}},
		{"id persists", "id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
			[]SSEEvent{{Data: "a", ID: "7"}, {Data: "b", ID: "7"}, {Data: "c"}}},
		{"id with NUL ignored", "id: 1\ndata: a\n\nid: x\x00y\ndata: b\n\n",
			[]SSEEvent{{Data: "a", ID: "1"}, {Data: "b", ID: "1"}}},
		{"unknown field ignored", "foo: bar\ndata: a\n\n",
			[]SSEEvent{{Data: "a"}}},
		{"BOM skipped", "\xEF\xBB\xBFdata: a\n\n",
			[]SSEEvent{{Data: "a"}}},
		{"second BOM is content", "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n",
			[]SSEEvent{{Data: "b"}}},
		{"unterminated event discarded", "data: a\n\ndata: b\n",
			[]SSEEvent{{Data: "a"}}},
		{"unterminated line discarded", "data: a\n\ndata: b",
			[]SSEEvent{{Data: "a"}}},
		{"blank lines alone", "\n\n\r\n\r", nil},
		{"event with colon in value", "event: a:b\ndata: x:y\n\n",
			[]SSEEvent{{Event: "a:b", Data: "x:y"}}},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":   func(r io.Reader) io.Reader { return r },
		"onebyte": iotest.OneByteReader,
		"half":    iotest.HalfReader,
	}
	for _, tt := range tests {
		for rname, wrap := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				got, err := readAll(t, wrap(strings.NewReader(tt.in)), 0)
				if !errors.Is(err, io.EOF) {
					t.Fatalf("err = %v, want io.EOF", err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("events = %#v\nwant %#v", got, tt.want)
				}
			})
		}
	}
}

func TestSSEReaderRetry(t *testing.T) {
	t.Parallel()
	sr := NewSSEReader(strings.NewReader("retry: 1500\ndata: a\n\nretry: x1\ndata: b\n\n"), 0)
	if _, err := sr.Next(); err != nil {
		t.Fatal(err)
	}
	if sr.Retry() != 1500*time.Millisecond {
		t.Fatalf("retry = %v", sr.Retry())
	}
	if _, err := sr.Next(); err != nil {
		t.Fatal(err)
	}
	if sr.Retry() != 1500*time.Millisecond {
		t.Fatalf("retry changed by a non-numeric value: %v", sr.Retry())
	}
}

// A CR ending an event must dispatch it without waiting to see whether an LF
// follows: the agent may say nothing more for a long time.
func TestSSEReaderCRDoesNotBlock(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("data: a\r\r")) }()
	got := make(chan SSEEvent, 1)
	go func() {
		ev, err := NewSSEReader(pr, 0).Next()
		if err == nil {
			got <- ev
		}
	}()
	select {
	case ev := <-got:
		if ev.Data != "a" {
			t.Fatalf("data = %q", ev.Data)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("event ending in CR was not dispatched until more input arrived")
	}
}

func TestSSEReaderTooLarge(t *testing.T) {
	t.Parallel()
	in := "data: small\n\ndata: " + strings.Repeat("x", 100) + "\n\ndata: after\n\n"
	for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader} {
		sr := NewSSEReader(wrap(strings.NewReader(in)), 64)
		ev, err := sr.Next()
		if err != nil || ev.Data != "small" {
			t.Fatalf("first = %+v, %v", ev, err)
		}
		if _, err := sr.Next(); !errors.Is(err, ErrEventTooLarge) {
			t.Fatalf("err = %v, want ErrEventTooLarge", err)
		}
		if _, err := sr.Next(); !errors.Is(err, ErrEventTooLarge) {
			t.Fatalf("error not sticky: %v", err)
		}
	}
	// Many small lines add up too.
	many := strings.Repeat("data: 0123456789\n", 10) + "\n"
	if _, err := readAll(t, strings.NewReader(many), 64); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
	// A line that never ends is refused once it passes the bound, not buffered forever.
	endless := io.MultiReader(strings.NewReader("data: "), infiniteReader('x'))
	if _, err := readAll(t, endless, 1024); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
}

// Comments are skipped as they stream past, so even a huge one is fine
// under a small bound.
func TestSSEReaderHugeComment(t *testing.T) {
	t.Parallel()
	in := ":" + strings.Repeat("k", 4<<20) + "\ndata: a\n\n"
	got, err := readAll(t, strings.NewReader(in), 64)
	if !errors.Is(err, io.EOF) || len(got) != 1 || got[0].Data != "a" {
		t.Fatalf("got %+v, %v", got, err)
	}
}

// Large events must cost linear time whether they come as one line, many
// lines, or in tiny reads.
func TestSSEReaderLargeEventsLinear(t *testing.T) {
	t.Parallel()
	const size = 8 << 20
	oneLine := "data: " + strings.Repeat("a", size) + "\n\n"
	manyLines := strings.Repeat("data: "+strings.Repeat("b", 60)+"\n", size/66) + "\n"
	for name, in := range map[string]io.Reader{
		"one line":   strings.NewReader(oneLine),
		"many lines": strings.NewReader(manyLines),
		"small reads": &chunkReader{
			data: []byte(oneLine), n: 7,
		},
	} {
		start := time.Now()
		got, err := readAll(t, in, 2*size)
		if !errors.Is(err, io.EOF) || len(got) != 1 {
			t.Fatalf("%s: %d events, %v", name, len(got), err)
		}
		if d := time.Since(start); d > 30*time.Second { // quadratic would take hours
			t.Fatalf("%s: 8 MiB event took %v", name, d)
		}
	}
}

func TestWriteSSEEventRefusesLineBreaks(t *testing.T) {
	t.Parallel()
	for _, ev := range []SSEEvent{{Event: "a\nb"}, {ID: "a\rb"}, {ID: "a\x00"}, {Data: "a\rb"}} {
		if err := WriteSSEEvent(io.Discard, ev); err == nil {
			t.Errorf("WriteSSEEvent(%q) succeeded", ev)
		}
	}
}

type infiniteReader byte

func (b infiniteReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	data []byte
	n    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.data))
	copy(p, c.data[:k])
	c.data = c.data[k:]
	return k, nil
}

func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"event: delta\ndata: {\"text\":\"hi\"}\n\n",
		"data: a\r\ndata: b\r\rdata:c\n\n",
		"\xEF\xBB\xBF: comment\nid: 1\nretry: 10\ndata\n\n",
		"event: a\x00id: b\x00data: line1\nline2",
		"data: " + strings.Repeat("x", 100) + "\n\n",
		"\xEF\xBB",
		"\r\n\r\n\n\r",
		"id: \x00\ndata: \xff\xfe\n\n",
		"event:\x00\x00\x00ev\x00\x00x\ny",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		const max = 64
		// Never panics, never yields an event beyond the bound, and the
		// result does not depend on how the input is split into reads.
		whole, werr := readAll(t, bytes.NewReader(in), max)
		split, serr := readAll(t, &chunkReader{data: in, n: int(chunk%16) + 1}, max)
		for _, ev := range whole {
			if len(ev.Data) > max || len(ev.Event) > max || len(ev.ID) > max {
				t.Fatalf("event over the %d-byte bound: %d/%d/%d", max, len(ev.Data), len(ev.Event), len(ev.ID))
			}
		}
		if !reflect.DeepEqual(whole, split) {
			t.Fatalf("split reads changed the events:\n%q\n%q", whole, split)
		}
		if errors.Is(werr, ErrEventTooLarge) != errors.Is(serr, ErrEventTooLarge) || !errors.Is(werr, io.EOF) && !errors.Is(werr, ErrEventTooLarge) {
			t.Fatalf("errors differ or unexpected: %v / %v", werr, serr)
		}

		// Round trip: events built from the input, written canonically,
		// read back identically (with the id carried over as the spec says).
		var want []SSEEvent
		var buf bytes.Buffer
		parts := bytes.Split(in, []byte{0})
		lastID := ""
		for i := 0; i+2 < len(parts); i += 3 {
			ev := SSEEvent{Event: string(parts[i]), ID: string(parts[i+1]), Data: string(parts[i+2])}
			if err := WriteSSEEvent(&buf, ev); err != nil {
				continue
			}
			if ev.ID == "" {
				ev.ID = lastID
			}
			lastID = ev.ID
			want = append(want, ev)
		}
		got, err := readAll(t, &buf, 0)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("round trip: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip:\ngot  %q\nwant %q", got, want)
		}
	})
}
