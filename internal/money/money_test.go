package money

import (
	"encoding/json"
	"testing"
)

func TestRoundPrintsTheDecimal(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{1e-07 + 9e-06, "0.0000091"}, // 9.100000000000001e-06 unrounded
		{0.00003399999999999999, "0.000034"},
		{0.1 + 0.2, "0.3"},
		{0, "0"},
		{12.3456789014, "12.345678901"},
	} {
		b, _ := json.Marshal(Round(tc.in))
		if string(b) != tc.want {
			t.Errorf("Round(%v) encodes as %s, want %s", tc.in, b, tc.want)
		}
	}
}
