package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// maxContextBody bounds one context blob.
const maxContextBody = 4 << 20

// contextOwner: context blobs belong to the calling agent (seed 000 §11.1).
func (a *API) contextOwner(w http.ResponseWriter, r *http.Request) (string, string, bool) {
	p, ok := a.principal(w, r)
	if !ok {
		return "", "", false
	}
	if p.Kind != auth.Agent {
		respond.Err(w, r, respond.E(http.StatusForbidden, "forbidden", "the context store is for agent keys"))
		return "", "", false
	}
	key := r.PathValue("key")
	if key == "" || len(key) > 512 {
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_key", "key must be 1-512 characters"))
		return "", "", false
	}
	return p.AgentID, key, true
}

func (a *API) contextPut(w http.ResponseWriter, r *http.Request) {
	owner, key, ok := a.contextOwner(w, r)
	if !ok {
		return
	}
	var body struct {
		Data      json.RawMessage `json:"data"`
		IfVersion *int64          `json:"if_version"`
	}
	if err := respond.DecodeJSON(w, r, maxContextBody, &body); err != nil {
		respond.Err(w, r, err)
		return
	}
	if len(body.Data) == 0 {
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_body", "body must be {data, if_version?}"))
		return
	}
	b, err := a.St.ContextPut(r.Context(), &store.ContextPutParams{OwnerID: owner, Key: key, Data: body.Data, IfVersion: body.IfVersion, At: time.Now().UnixMilli()})
	if errors.Is(err, store.ErrConflict) {
		e := respond.E(http.StatusConflict, "version_conflict", "the latest version is not if_version")
		if cur, err := a.St.ContextGet(r.Context(), owner, key, 0); err == nil {
			e.Details = map[string]any{"version": cur.Version}
		}
		err = e
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, map[string]any{"key": b.Key, "version": b.Version, "created_at": b.CreatedAt})
}

func (a *API) contextGet(w http.ResponseWriter, r *http.Request) {
	owner, key, ok := a.contextOwner(w, r)
	if !ok {
		return
	}
	version, err := intParam(r, "version", 0)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	b, err := a.St.ContextGet(r.Context(), owner, key, version)
	if errors.Is(err, store.ErrNotFound) {
		err = respond.E(http.StatusNotFound, "context_not_found", "no such context key or version")
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, b)
}
