package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// cursor is what a next_cursor encodes: the listing it belongs to and the
// last row of the page (its ordering key and id). It is opaque to clients
// (base64url of this JSON) so its shape may change; the listing name stops
// a cursor of one listing being replayed against another.
type cursor struct {
	List string `json:"l"`
	Key  int64  `json:"k,omitempty"`
	ID   string `json:"i"`
}

func errBadCursor() error {
	return respond.E(http.StatusBadRequest, "invalid_cursor", "cursor is not a next_cursor this listing returned")
}

func encodeCursor(list string, key int64, id string) string {
	b, _ := json.Marshal(cursor{List: list, Key: key, ID: id})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads ?cursor= of list; nil when absent.
func decodeCursor(r *http.Request, list string) (*cursor, error) {
	v := r.URL.Query().Get("cursor")
	if v == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	var c cursor
	if err != nil || json.Unmarshal(b, &c) != nil || c.List != list || c.ID == "" {
		return nil, errBadCursor()
	}
	return &c, nil
}

// storeCursor is c as the store's keyset position (nil stays nil).
func (c *cursor) storeCursor() *store.Cursor {
	if c == nil {
		return nil
	}
	return &store.Cursor{Key: c.Key, ID: c.ID}
}

// limitParam reads ?limit= within 1..max, def when absent.
func limitParam(r *http.Request, def, max int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, respond.E(http.StatusBadRequest, "invalid_param", "limit must be 1.."+strconv.Itoa(max))
	}
	return n, nil
}

// timeParam reads a point in time: milliseconds since the epoch (as every
// timestamp of the API) or RFC 3339. 0 when absent.
func timeParam(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UnixMilli(), nil
	}
	return 0, respond.E(http.StatusBadRequest, "invalid_param", name+" must be milliseconds since the epoch or an RFC 3339 time")
}

// boolParam reads ?name=true|false|1|0 (false when absent).
func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, respond.E(http.StatusBadRequest, "invalid_param", name+" must be true or false")
	}
	return b, nil
}

// orderParam reads ?order=asc|desc; def when absent.
func orderParam(r *http.Request, def string) (desc bool, err error) {
	v := r.URL.Query().Get("order")
	if v == "" {
		v = def
	}
	switch v {
	case "asc":
		return false, nil
	case "desc":
		return true, nil
	}
	return false, respond.E(http.StatusBadRequest, "invalid_param", "order must be asc or desc")
}
