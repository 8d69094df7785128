package llmproxy

import (
	"net/url"
	"strings"
)

// upstream is a configured Upstream, ready to use.
type upstream struct {
	Upstream
	base *url.URL
	// authorization is the Authorization header's value, made once (nil
	// without an API key); the transport only reads a request's headers.
	authorization []string
}

// endpointURL is base + suffix ("/chat/completions") with the client's query.
func (u *upstream) endpointURL(suffix, rawQuery string) *url.URL {
	v := *u.base
	v.Path = strings.TrimSuffix(v.Path, "/") + suffix
	if v.RawPath != "" {
		v.RawPath = strings.TrimSuffix(v.RawPath, "/") + suffix
	}
	v.RawQuery = rawQuery
	return &v
}

// router picks the upstream for a model.
type router struct {
	ups      []*upstream
	byName   map[string]*upstream
	catchAll *upstream
	fallback []*upstream
}

func newRouter(cfg Config) (*router, error) {
	rt := &router{byName: map[string]*upstream{}}
	for _, cu := range cfg.Upstreams {
		base, err := url.Parse(cu.BaseURL)
		if err != nil {
			return nil, err
		}
		u := &upstream{Upstream: cu, base: base}
		if cu.APIKey != "" {
			u.authorization = []string{"Bearer " + cu.APIKey}
		}
		rt.ups = append(rt.ups, u)
		rt.byName[u.Name] = u
		if len(u.Prefixes) == 0 && rt.catchAll == nil {
			rt.catchAll = u
		}
	}
	for _, name := range cfg.Fallback {
		rt.fallback = append(rt.fallback, rt.byName[name])
	}
	return rt, nil
}

// route returns the upstream for model and the model name to send it.
func (rt *router) route(model string) (*upstream, string, bool) {
	var best *upstream
	bestLen := -1
	bestPrefix := ""
	for _, u := range rt.ups {
		for _, p := range u.Prefixes {
			if len(p) > bestLen && strings.HasPrefix(model, p) {
				best, bestLen, bestPrefix = u, len(p), p
			}
		}
	}
	if best == nil {
		if rt.catchAll == nil {
			return nil, "", false
		}
		return rt.catchAll, model, true
	}
	if best.StripPrefix && strings.HasSuffix(bestPrefix, "/") && len(model) > len(bestPrefix) {
		return best, model[len(bestPrefix):], true
	}
	return best, model, true
}

// candidates is the routed upstream followed by the fallback list, each once.
func (rt *router) candidates(first *upstream) []*upstream {
	if len(rt.fallback) == 0 {
		return []*upstream{first}
	}
	out := make([]*upstream, 0, 1+len(rt.fallback))
	out = append(out, first)
	for _, f := range rt.fallback {
		if f != first {
			out = append(out, f)
		}
	}
	return out
}

// upstreamModel is the model name to send to u for a call routed elsewhere
// first: a fallback upstream gets the name its own route would give it,
// stripped of the prefix the client used when that prefix belongs to
// another upstream.
func upstreamModelFor(u *upstream, model, routed string) string {
	for _, p := range u.Prefixes {
		if strings.HasPrefix(model, p) {
			if u.StripPrefix && strings.HasSuffix(p, "/") && len(model) > len(p) {
				return model[len(p):]
			}
			return model
		}
	}
	return routed
}
