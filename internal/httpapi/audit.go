package httpapi

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// auditList serves GET /v1/audit?actor=&action=&since=&until=&limit=&cursor=
// (admin): the audit log, newest first, in pages; next_cursor continues
// where a full page stopped.
func (a *API) auditList(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	q := r.URL.Query()
	p := &store.AuditListParams{Actor: q.Get("actor"), Action: q.Get("action"), Limit: 100}
	var err error
	if p.Since, err = msParam(q.Get("since"), "since"); err != nil {
		respond.Err(w, r, err)
		return
	}
	if p.Until, err = msParam(q.Get("until"), "until"); err != nil {
		respond.Err(w, r, err)
		return
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_param", "limit must be 1-1000"))
			return
		}
		p.Limit = n
	}
	if c := q.Get("cursor"); c != "" {
		ts, id, ok := decodeAuditCursor(c)
		if !ok {
			respond.Err(w, r, errBadCursor())
			return
		}
		p.BeforeTS, p.BeforeID = ts, id
	}
	entries, err := a.St.AuditList(r.Context(), p)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	body := map[string]any{"entries": entries}
	if len(entries) == p.Limit {
		last := entries[len(entries)-1]
		body["next_cursor"] = encodeAuditCursor(last.TS, last.AuditID)
	}
	respond.JSON(w, http.StatusOK, body)
}

// msParam parses a time in ms since the epoch (empty: 0).
func msParam(s, name string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, respond.E(http.StatusBadRequest, "invalid_param", name+" must be a time in milliseconds since the epoch")
	}
	return n, nil
}

// The cursor is opaque to clients: the (ts, audit_id) of the page's last
// entry.
func encodeAuditCursor(ts int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(ts, 10) + ":" + id))
}

func decodeAuditCursor(c string) (int64, string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", false
	}
	tsStr, id, ok := strings.Cut(string(b), ":")
	ts, err := strconv.ParseInt(tsStr, 10, 64)
	if !ok || err != nil || id == "" {
		return 0, "", false
	}
	return ts, id, true
}
