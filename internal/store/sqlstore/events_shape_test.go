package sqlstore

import "testing"

func TestShapeChunksArePowersOfTwoCoveringN(t *testing.T) {
	for n := 0; n <= 1100; n++ {
		next := 0
		for start, size := range shapeChunks(n, 256) {
			if start != next || size <= 0 || size > 256 || size&(size-1) != 0 {
				t.Fatalf("n=%d: chunk at %d of %d (want start %d, a power of two ≤ 256)", n, start, size, next)
			}
			next += size
		}
		if next != n {
			t.Fatalf("n=%d: chunks cover %d", n, next)
		}
	}
}
