package demo

import (
	"reflect"
	"testing"
)

func TestRouteMessage(t *testing.T) {
	tests := []struct {
		text string
		want route
	}{
		{"What's the weather in Tokyo?", route{ToolWeather, map[string]any{"city": "Tokyo"}}},
		{"weather in new york today please", route{ToolWeather, map[string]any{"city": "New York"}}},
		{"How is the WEATHER for São Paulo.", route{ToolWeather, map[string]any{"city": "São Paulo"}}},
		{"what's the weather like", route{ToolWeather, map[string]any{"city": "Paris"}}},
		{"forecast at Rio de Janeiro", route{ToolWeather, map[string]any{"city": "Rio De Janeiro"}}},
		{"weather in Paris at this time", route{ToolWeather, map[string]any{"city": "Paris"}}},
		{"What time is it?", route{ToolNow, map[string]any{}}},
		{"check the clock", route{ToolNow, map[string]any{}}},
		{"send 250 to Bob", route{ToolTransfer, map[string]any{"amount": 250.0, "to": "Bob"}}},
		{"Please transfer $1,000.50 to Alice Smith now!", route{ToolTransfer, map[string]any{"amount": 1000.5, "to": "Alice Smith"}}},
		{"send 12.5 euros to carol, thanks", route{ToolTransfer, map[string]any{"amount": 12.5, "to": "carol"}}},
		{"send 40€ to Dave at the time you like", route{ToolTransfer, map[string]any{"amount": 40.0, "to": "Dave"}}},
		{"transfer 7 to Eve in Berlin", route{ToolTransfer, map[string]any{"amount": 7.0, "to": "Eve"}}},
		{"send 0 to Bob", route{ToolTransfer, map[string]any{"amount": 0.0, "to": "Bob"}}},
		// Not a transfer: no amount, or no payee. "time" still routes.
		{"send it to Bob", route{}},
		{"transfer 5 to", route{}},
		{"sometimes I wonder", route{}},
		{"hello there", route{}},
		{"", route{}},
	}
	for _, tt := range tests {
		if got := routeMessage(tt.text); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("routeMessage(%q) = %+v, want %+v", tt.text, got, tt.want)
		}
	}
}

func TestFormatAmount(t *testing.T) {
	for in, want := range map[float64]string{250: "250", 12.5: "12.50", 0.1: "0.10", 1000.25: "1000.25"} {
		if got := formatAmount(in); got != want {
			t.Errorf("formatAmount(%v) = %q, want %q", in, got, want)
		}
	}
}
