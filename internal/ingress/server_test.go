package ingress

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A request the upgrader refuses gets the structured HTTP error of every
// refusal (DESIGN §2.7), not a text/plain "Bad Request".
func TestUpgradeRefusalIsStructured(t *testing.T) {
	url := "http" + strings.TrimPrefix(newTestServer(t, Options{}), "ws")
	upgrade := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	for _, tc := range []struct {
		name, method string
		header       http.Header
		status       int
		code         string
	}{
		{"a plain GET", http.MethodGet, nil, http.StatusBadRequest, "websocket_upgrade_required"},
		{"no key", http.MethodGet, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}}, http.StatusBadRequest, "websocket_upgrade_required"},
		{"another method", http.MethodPut, upgrade, http.StatusMethodNotAllowed, "method_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, url, nil)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct{ Code, Message string }
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("%d %s: body is not JSON: %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
			}
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" || body.Error.Code != tc.code || body.Error.Message == "" {
				t.Fatalf("%d %s %+v, want %d %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status, tc.code)
			}
			if tc.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != http.MethodGet {
				t.Fatalf("405 without Allow: GET (%q)", resp.Header.Get("Allow"))
			}
		})
	}
}
