package main

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

type pct struct {
	n                   int
	p50, p90, p99, mean time.Duration
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
	return pct{len(s), at(0.50), at(0.90), at(0.99), sum / time.Duration(len(s))}
}

func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) }

func (p pct) String() string {
	return fmt.Sprintf("n=%d p50 %s p90 %s p99 %s mean %s µs", p.n, us(p.p50), us(p.p90), us(p.p99), us(p.mean))
}
