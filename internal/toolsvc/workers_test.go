package toolsvc

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Calls one after the other share one goroutine; concurrent calls each
// start at once on a goroutine of their own (none waits for another);
// every function runs exactly once; and idle workers end with done.
func TestWorkers(t *testing.T) {
	done := make(chan struct{})
	w := newWorkers(done, time.Minute)

	var ran atomic.Int64
	idle := func(atLeast bool, n int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			if got := w.waiting.Load(); got == n || atLeast && got > n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d idle workers, want %d", w.waiting.Load(), n)
			}
		}
	}
	var spawned int64
	for range 100 {
		if ran.Load() > 0 {
			idle(true, 1)
		}
		before := w.started.Load()
		finished := make(chan struct{})
		w.run(func() { ran.Add(1); close(finished) })
		<-finished
		spawned += w.started.Load() - before
	}
	// The first call starts the worker; the others find it idle (a worker
	// counts as waiting an instant before it waits: allow for a few).
	if spawned < 1 || spawned > 5 {
		t.Fatalf("%d goroutines started for 100 sequential calls", spawned)
	}
	started := w.started.Load()

	// 8 calls that block until all 8 run: none may wait for a worker.
	var all sync.WaitGroup
	all.Add(8)
	release := make(chan struct{})
	var both sync.WaitGroup
	both.Add(8)
	for range 8 {
		w.run(func() { all.Done(); <-release; ran.Add(1); both.Done() })
	}
	waited := make(chan struct{})
	go func() { all.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("concurrent calls waited for one another")
	}
	close(release)
	both.Wait()
	if got := ran.Load(); got != 108 {
		t.Fatalf("%d functions ran, want 108", got)
	}
	if n := w.started.Load() - started; n > 8 {
		t.Fatalf("%d goroutines started for 8 concurrent calls", n)
	}
	idle(false, w.started.Load()) // every worker waits for a call: none ended

	close(done)
	idle(false, 0)
}

// A worker that gets no call within keep ends.
func TestWorkersEndWhenIdle(t *testing.T) {
	w := newWorkers(make(chan struct{}), 50*time.Millisecond)
	finished := make(chan struct{})
	w.run(func() { close(finished) })
	<-finished
	// Only watched, not sent anything (a call would keep it).
	for deadline := time.Now().Add(10 * time.Second); w.ended.Load() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle worker did not end")
		}
	}
	select {
	case w.idle <- func() {}:
		t.Fatal("a worker still takes calls")
	default:
	}
	// The next call starts a new one.
	finished = make(chan struct{})
	w.run(func() { close(finished) })
	<-finished
	if n := w.started.Load(); n != 2 {
		t.Fatalf("%d goroutines started, want 2", n)
	}
}
