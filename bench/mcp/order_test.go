package main

import "testing"

// Every order of the four calls once, the fixed order first, and within a
// cycle every call follows every other equally often.
func TestCycleOrders(t *testing.T) {
	if len(cycleOrders) != 24 {
		t.Fatalf("%d orders, want 24", len(cycleOrders))
	}
	if cycleOrders[0] != [kinds]int{httpDirect, httpInvoke, mcpDirect, mcpInvoke} {
		t.Fatalf("the first order is %v, not the fixed one", cycleOrders[0])
	}
	seen := map[[kinds]int]bool{}
	var follows [kinds][kinds]int
	for _, o := range cycleOrders {
		if seen[o] {
			t.Fatalf("order %v twice", o)
		}
		seen[o] = true
		for i := 1; i < kinds; i++ {
			follows[o[i-1]][o[i]]++
		}
	}
	for a := range kinds {
		for b := range kinds {
			if a != b && follows[a][b] != 6 {
				t.Fatalf("%s is followed by %s %d times, want 6", kindNames[a], kindNames[b], follows[a][b])
			}
		}
	}
}
