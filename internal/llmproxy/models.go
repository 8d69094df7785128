package llmproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// serveModels answers GET /v1/models. With one upstream the list is passed
// through verbatim. With several, their lists are merged and each model id
// is given the prefix that routes to it (when the route strips one), so a
// client can use any listed id as is. It is not metered.
func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request) {
	if _, err := p.auth(r); err != nil {
		writeError(w, err)
		return
	}
	if len(p.rt.ups) == 0 {
		writeError(w, errNotConfigured)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.Timeouts.FirstByte)
	defer cancel()
	if len(p.rt.ups) == 1 {
		status, h, body, err := p.getModels(ctx, r, p.rt.ups[0])
		if err != nil {
			writeError(w, &Error{Status: http.StatusBadGateway, Code: CodeUpstreamError, Message: err.Error()})
			return
		}
		copyHeader(w.Header(), h)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}

	type list struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}
	merged := list{Object: "list", Data: []json.RawMessage{}}
	var firstErr error
	answered := false
	for _, u := range p.rt.ups {
		status, _, body, err := p.getModels(ctx, r, u)
		if err == nil && status != http.StatusOK {
			err = &Error{Status: status, Code: CodeUpstreamError, Message: u.Name + ": " + strings.TrimSpace(string(body))}
		}
		var l list
		if err == nil {
			err = json.Unmarshal(body, &l)
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		answered = true
		prefix := ""
		if u.StripPrefix {
			for _, pre := range u.Prefixes {
				if strings.HasSuffix(pre, "/") {
					prefix = pre
					break
				}
			}
		}
		for _, m := range l.Data {
			if prefix != "" {
				m = prefixModelID(m, prefix)
			}
			merged.Data = append(merged.Data, m)
		}
	}
	if !answered {
		writeError(w, &Error{Status: http.StatusBadGateway, Code: CodeUpstreamError, Message: firstErr.Error()})
		return
	}
	body, _ := json.Marshal(merged)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

func (p *Proxy) getModels(ctx context.Context, r *http.Request, u *upstream) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "", nil)
	if err != nil {
		return 0, nil, nil, err
	}
	req.URL = u.endpointURL("/models", r.URL.RawQuery)
	req.Host = req.URL.Host
	req.Header = upstreamHeader(r.Header, u.authorization)
	resp, err := p.tr.RoundTrip(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, body, nil
}

// prefixModelID rewrites {"id":"gpt-4o",…} to {"id":"openai/gpt-4o",…}.
func prefixModelID(m json.RawMessage, prefix string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(m, &obj) != nil {
		return m
	}
	var id string
	if json.Unmarshal(obj["id"], &id) != nil || strings.HasPrefix(id, prefix) {
		return m
	}
	obj["id"], _ = json.Marshal(prefix + id)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(obj) != nil {
		return m
	}
	return bytes.TrimSpace(b.Bytes())
}
