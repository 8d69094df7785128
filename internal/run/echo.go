package run

import (
	"strings"
	"sync"
	"time"
)

// echoInterval is how long a child's delta text may wait before it is
// echoed to the session's clients as sub_agent_partial, and the least time
// between two partials, under sub_agent_echo "aggregate" (DESIGN §11).
const echoInterval = 100 * time.Millisecond

// aggregator buffers a child run's delta text and hands it on at most
// every echoInterval, and at least that soon after it arrived. It holds
// only the text since its last flush.
type aggregator struct {
	emit func(text string) // appends one sub_agent_partial

	mu     sync.Mutex
	buf    strings.Builder
	timer  *time.Timer
	closed bool
}

func newAggregator(emit func(string)) *aggregator { return &aggregator{emit: emit} }

// add buffers text and arms the flush timer if it is not armed.
func (g *aggregator) add(text string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || text == "" {
		return
	}
	g.buf.WriteString(text)
	if g.timer == nil {
		g.timer = time.AfterFunc(echoInterval, g.flush)
	}
}

func (g *aggregator) flush() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.timer = nil
	if g.closed {
		return
	}
	g.emitLocked()
}

// emitLocked hands the buffer on. Under g.mu, so partials are queued in
// the order of their text.
func (g *aggregator) emitLocked() {
	if g.buf.Len() == 0 {
		return
	}
	text := g.buf.String()
	g.buf.Reset()
	g.emit(text)
}

// close stops the timer and, when flush is set, hands on what is buffered
// (the run's final partial, before its end); nothing is emitted after it.
func (g *aggregator) close(flush bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.closed = true
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	if flush {
		g.emitLocked()
	}
	g.buf.Reset()
}
