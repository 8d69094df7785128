package respond

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
)

func TestErrStatuses(t *testing.T) {
	for name, tc := range map[string]struct {
		err        error
		status     int
		code       string
		retryAfter string
	}{
		"api error":   {fmt.Errorf("wrapped: %w", E(http.StatusConflict, "session_busy", "busy")), 409, "session_busy", ""},
		"unavailable": {fmt.Errorf("get run: %w", fmt.Errorf("%w: dial tcp: connection refused", store.ErrUnavailable)), 503, "store_unavailable", "2"},
		"internal":    {errors.New("boom"), 500, "internal", ""},
		"not found":   {store.ErrNotFound, 500, "internal", ""}, // handlers map it to their own 404
	} {
		t.Run(name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Err(w, httptest.NewRequest("GET", "/x", nil), tc.err)
			var body struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if w.Code != tc.status || body.Error.Code != tc.code || w.Header().Get("Retry-After") != tc.retryAfter {
				t.Fatalf("%d %s Retry-After %q, want %d %s %q", w.Code, body.Error.Code, w.Header().Get("Retry-After"), tc.status, tc.code, tc.retryAfter)
			}
		})
	}
}
