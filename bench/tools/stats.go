package main

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

type pct struct {
	n                        int
	p50, p90, p99, max, mean time.Duration
}

// percentiles of s (sorted in place), nearest rank.
func percentiles(s []time.Duration) pct {
	if len(s) == 0 {
		return pct{}
	}
	slices.Sort(s)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return pct{len(s), at(0.50), at(0.90), at(0.99), s[len(s)-1], sum / time.Duration(len(s))}
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

func (p pct) String() string {
	return fmt.Sprintf("n=%d p50 %s p90 %s p99 %s max %s mean %s ms", p.n, ms(p.p50), ms(p.p90), ms(p.p99), ms(p.max), ms(p.mean))
}

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f×", float64(a)/float64(b))
}
