package httpapi

import (
	"errors"
	"net/http"
	"regexp"
	"time"

	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// userIDPattern is what a user id managed over the API may be: it appears
// in hello, in audit actors ("user:<id>") and in AGENTPLANE_API_KEYS-style
// lists, so no ':' or ','.
var userIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@\-]{0,127}$`)

var (
	errInvalidUser = respond.E(http.StatusBadRequest, "invalid_user_id", "user_id must be 1-128 letters, digits, '_', '-', '.', '@'")
	errKeyNotFound = respond.E(http.StatusNotFound, "key_not_found", "that user has no such key")
	maxKeysPerUser = 100
	errTooManyKeys = respond.E(http.StatusConflict, "too_many_keys", "a user may have at most 100 keys; delete one first")
)

// userKeyCreated answers POST /v1/users/{user_id}/keys: the key is in it
// once, never again.
type userKeyCreated struct {
	KeyID     string `json:"key_id"`
	Key       string `json:"key"`
	UserID    string `json:"user_id"`
	CreatedAt int64  `json:"created_at"`
}

// userKeyCreate issues a key for a user (admin). It works at once on every
// replica: keys are looked up in the store.
func (a *API) userKeyCreate(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	userID := r.PathValue("user_id")
	if !userIDPattern.MatchString(userID) {
		respond.Err(w, r, errInvalidUser)
		return
	}
	key := ids.Secret("usr_")
	k := &store.UserKey{KeyID: ids.New("key"), UserID: userID, KeyHash: auth.HashKey(key), CreatedAt: time.Now().UnixMilli()}
	ctx := a.auditCtx(r)
	err := a.St.InTx(ctx, func(tx store.Queries) error {
		have, err := tx.UserKeyList(ctx, userID)
		if err != nil {
			return err
		}
		if len(have) >= maxKeysPerUser {
			return errTooManyKeys
		}
		if err := tx.UserKeyInsert(ctx, k); err != nil {
			return err
		}
		return audit.Write(ctx, tx, audit.UserKeyCreate, userID, map[string]any{"key_id": k.KeyID})
	})
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusCreated, userKeyCreated{KeyID: k.KeyID, Key: key, UserID: userID, CreatedAt: k.CreatedAt})
}

// userKeyList lists a user's keys without secrets (admin).
func (a *API) userKeyList(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	userID := r.PathValue("user_id")
	if !userIDPattern.MatchString(userID) {
		respond.Err(w, r, errInvalidUser)
		return
	}
	keys, err := a.St.UserKeyList(r.Context(), userID)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, map[string]any{"user_id": userID, "keys": keys})
}

// userKeyDelete revokes a key (admin): at once on this replica, within the
// key cache's TTL (5 s) on the others.
func (a *API) userKeyDelete(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	userID, keyID := r.PathValue("user_id"), r.PathValue("key_id")
	ctx := a.auditCtx(r)
	err := a.St.InTx(ctx, func(tx store.Queries) error {
		if _, err := tx.UserKeyDelete(ctx, userID, keyID); err != nil {
			return err
		}
		return audit.Write(ctx, tx, audit.UserKeyDelete, userID, map[string]any{"key_id": keyID})
	})
	if errors.Is(err, store.ErrNotFound) {
		err = errKeyNotFound
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	a.Keys.ForgetUser(userID)
	respond.JSON(w, http.StatusOK, map[string]any{"ok": true, "user_id": userID, "key_id": keyID})
}
