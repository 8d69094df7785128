package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/a2aremote"
	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/store"
)

// prober marks agents healthy or unhealthy by GET {endpoint}/health, or,
// for a remote A2A agent, by fetching its card.
type prober struct {
	st       store.Store
	client   *agent.Client
	a2a      *a2aremote.Client
	interval time.Duration
	log      *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (p *prober) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(p.interval)
		defer t.Stop()
		for {
			p.probeAll(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop may be called more than once.
func (p *prober) Stop() {
	p.once.Do(func() {
		if p.cancel != nil {
			p.cancel()
			<-p.done
		}
	})
}

func (p *prober) probeAll(ctx context.Context) {
	agents, err := p.st.AgentList(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("health probe: list agents", "err", err)
		}
		return
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			status := store.AgentHealthy
			probe := p.client.Probe
			if a.Protocol == store.ProtocolA2A && p.a2a != nil {
				probe = p.a2a.Probe
			}
			if err := probe(pctx, a.Endpoint); err != nil {
				status = store.AgentUnhealthy
				if a.Status != store.AgentUnhealthy {
					p.log.Warn("agent unhealthy", "agent_id", a.AgentID, "err", err)
				}
			}
			if ctx.Err() == nil {
				if err := p.st.AgentSetStatus(ctx, a.AgentID, status, time.Now().UnixMilli()); err != nil && ctx.Err() == nil {
					p.log.Warn("health probe: record", "agent_id", a.AgentID, "err", err)
				}
			}
		}()
	}
	wg.Wait()
}
