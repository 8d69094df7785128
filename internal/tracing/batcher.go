package tracing

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// batcher batches ended spans like the SDK's batch processor, except that
// ending a span only appends it to a slice under a mutex: the exporting
// goroutine wakes on its timer or when a batch is full, not once per span.
// The SDK's processor hands every span over a channel, which wakes its
// parked goroutine for each one; at the proxy's rate of small calls those
// wake-ups cost more CPU than the span itself (BENCHMARKS.md,
// observability). It reads the standard OTEL_BSP_SCHEDULE_DELAY (ms),
// OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE and
// OTEL_BSP_EXPORT_TIMEOUT (ms); spans past
// the queue's size are dropped, as the SDK's are.
type batcher struct {
	exp              spanExporter
	delay, timeout   time.Duration
	maxQueue, maxOut int

	mu   sync.Mutex
	buf  []*span
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
	// exporting serialises exports (the loop, ForceFlush, Shutdown).
	exporting sync.Mutex
}

// spanExporter sends a batch of ended spans.
type spanExporter interface {
	export(ctx context.Context, spans []*span) error
	shutdown(ctx context.Context) error
}

func newBatcher(exp spanExporter, getenv func(string) string) *batcher {
	num := func(k string, def int) int {
		if n, err := strconv.Atoi(getenv(k)); err == nil && n > 0 {
			return n
		}
		return def
	}
	b := &batcher{exp: exp, delay: time.Duration(num("OTEL_BSP_SCHEDULE_DELAY", 5000)) * time.Millisecond,
		timeout:  time.Duration(num("OTEL_BSP_EXPORT_TIMEOUT", 30000)) * time.Millisecond,
		maxQueue: num("OTEL_BSP_MAX_QUEUE_SIZE", 2048), maxOut: num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	b.maxOut = min(b.maxOut, b.maxQueue)
	go b.loop()
	return b
}

// add queues an ended, sampled span.
func (b *batcher) add(s *span) {
	b.mu.Lock()
	if len(b.buf) < b.maxQueue {
		b.buf = append(b.buf, s)
	}
	full := len(b.buf) >= b.maxOut
	b.mu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

func (b *batcher) loop() {
	defer close(b.done)
	t := time.NewTicker(b.delay)
	defer t.Stop()
	for {
		all := true
		select {
		case <-b.stop:
			return
		case <-t.C:
		case <-b.kick:
			all = false // full batches only: no small post of the stragglers
		}
		_ = b.export(context.Background(), all)
	}
}

// export sends what is queued, a batch at a time: everything, or (all
// false) full batches only.
func (b *batcher) export(ctx context.Context, all bool) error {
	b.exporting.Lock()
	defer b.exporting.Unlock()
	for {
		b.mu.Lock()
		n := min(len(b.buf), b.maxOut)
		if n == 0 || (!all && n < b.maxOut) {
			b.mu.Unlock()
			return nil
		}
		batch := make([]*span, n)
		copy(batch, b.buf)
		rest := copy(b.buf, b.buf[n:])
		clear(b.buf[rest:]) // no stale references keep exported spans alive
		b.buf = b.buf[:rest]
		b.mu.Unlock()
		ectx, cancel := context.WithTimeout(ctx, b.timeout)
		err := b.exp.export(ectx, batch)
		cancel()
		if err != nil {
			otelHandle(err)
			if ctx.Err() != nil {
				return err
			}
		}
	}
}

func (b *batcher) ForceFlush(ctx context.Context) error { return b.export(ctx, true) }

func (b *batcher) Shutdown(ctx context.Context) error {
	var err error
	b.once.Do(func() {
		close(b.stop)
		<-b.done
		err = b.export(ctx, true)
		if e := b.exp.shutdown(ctx); err == nil {
			err = e
		}
	})
	return err
}
