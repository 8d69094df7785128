package toolsvc

import (
	"sync/atomic"
	"time"
)

// workers runs the background sends of claimed tool calls on goroutines
// that are kept for the next call. A new goroutine starts with a small
// stack, which a call's request and answer (net/http, the JSON decoding
// of an MCP answer) grow several times over, copying it each time: about
// 1 % of the server's CPU in the tool benchmarks, and the largest single
// difference between an MCP call and a native one in the profile (issue
// 12). A worker keeps its grown stack from call to call, as gRPC's stream
// workers do. Nothing is queued: a call that finds no idle worker gets a
// goroutine of its own at once, which then stays as a worker.
type workers struct {
	idle chan func()
	done <-chan struct{}
	// keep is how long a worker waits for another call before it ends:
	// long enough to span the gaps between one caller's calls, short
	// enough that a burst of concurrent calls does not leave its
	// goroutines (and their stacks) behind for long.
	keep time.Duration
	// started and ended count the goroutines started and ended, waiting
	// the idle ones (tests).
	started, ended, waiting atomic.Int64
}

// workerKeep is workers.keep in the service.
const workerKeep = 5 * time.Second

func newWorkers(done <-chan struct{}, keep time.Duration) *workers {
	return &workers{idle: make(chan func()), done: done, keep: keep}
}

// run runs fn on an idle worker, or on a new one.
func (w *workers) run(fn func()) {
	select {
	case w.idle <- fn:
	default:
		w.started.Add(1)
		go w.loop(fn)
	}
}

func (w *workers) loop(fn func()) {
	defer w.ended.Add(1)
	var t *time.Timer
	for {
		fn()
		if t == nil {
			t = time.NewTimer(w.keep)
			defer t.Stop()
		} else {
			t.Reset(w.keep)
		}
		w.waiting.Add(1)
		select {
		case fn = <-w.idle:
			w.waiting.Add(-1)
		case <-t.C:
			w.waiting.Add(-1)
			return
		case <-w.done:
			w.waiting.Add(-1)
			return
		}
	}
}
