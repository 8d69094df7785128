package a2aremote

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
)

// watchdog bounds a call as agent.Client bounds an invoke: the first event
// within the first-byte timeout, then no silence (no bytes at all) longer
// than the idle timeout, the time spent in the run's handler not counted,
// and any timeout excused while paused reports true (the run waits on the
// platform). It cancels the call with an agent_timeout cause.
type watchdog struct {
	cancel    context.CancelCauseFunc
	idle      time.Duration
	paused    func() bool
	mu        sync.Mutex
	t         *time.Timer
	streaming bool
	stopped   bool
}

func newWatchdog(cancel context.CancelCauseFunc, first, idle time.Duration, paused func() bool) *watchdog {
	w := &watchdog{cancel: cancel, idle: idle, paused: paused}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.arm(first, fmt.Sprintf("no answer and first event from the A2A agent within %s", first))
	return w
}

func (w *watchdog) arm(d time.Duration, why string) {
	w.t = time.AfterFunc(d, func() { w.fire(d, why) })
}

func (w *watchdog) fire(d time.Duration, why string) {
	if w.paused != nil && w.paused() {
		w.mu.Lock()
		if !w.stopped {
			w.t.Reset(d)
		}
		w.mu.Unlock()
		return
	}
	w.cancel(&agent.InvokeError{Code: agent.CodeAgentTimeout, Message: why})
}

// activity: bytes arrived; once events flow it restarts the idle clock.
func (w *watchdog) activity() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streaming && !w.stopped {
		w.t.Reset(w.idle)
	}
}

// pause stops the clock while the run's handler works.
func (w *watchdog) pause() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Stop()
}

// resume restarts the idle clock (the first call switches from the
// first-byte deadline to it).
func (w *watchdog) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if w.streaming {
		w.t.Reset(w.idle)
		return
	}
	w.streaming = true
	w.t.Stop()
	w.arm(w.idle, fmt.Sprintf("the A2A agent was silent for more than %s", w.idle))
}

func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.t.Stop()
}
