package auth

import (
	"net/http/httptest"
	"testing"
)

// A key may come in Authorization: Bearer, x-api-key or x-admin-key (seed
// 001's header for the admin key); Authorization wins.
func TestBearerHeaders(t *testing.T) {
	for _, tc := range []struct {
		headers map[string]string
		want    string
	}{
		{map[string]string{"Authorization": "Bearer k1"}, "k1"},
		{map[string]string{"Authorization": "bearer  k1 "}, "k1"},
		{map[string]string{"x-api-key": "k2"}, "k2"},
		{map[string]string{"x-admin-key": "k3"}, "k3"},
		{map[string]string{"Authorization": "Bearer k1", "x-admin-key": "k3"}, "k1"},
		{map[string]string{"Authorization": "Basic xyz"}, ""},
		{nil, ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for k, v := range tc.headers {
			r.Header.Set(k, v)
		}
		if got := Bearer(r); got != tc.want {
			t.Errorf("%v: key %q, want %q", tc.headers, got, tc.want)
		}
	}
}
