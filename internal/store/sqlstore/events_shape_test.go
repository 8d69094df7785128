package sqlstore

import "testing"

// Up to exactChunk rows go in one statement; more in powers of two, so a
// statement has few distinct texts.
func TestShapeChunksArePowersOfTwoCoveringN(t *testing.T) {
	texts := map[int]bool{}
	for n := 0; n <= 1100; n++ {
		next, chunks := 0, 0
		for start, size := range shapeChunks(n, 256) {
			chunks++
			texts[size] = true
			exact := n <= exactChunk && size == n
			if start != next || size <= 0 || size > 256 || (!exact && size&(size-1) != 0) {
				t.Fatalf("n=%d: chunk at %d of %d (want start %d, a power of two ≤ 256 or all %d rows)", n, start, size, next, n)
			}
			next += size
		}
		if n > 0 && n <= exactChunk && chunks != 1 {
			t.Fatalf("n=%d: %d statements, want 1", n, chunks)
		}
		if next != n {
			t.Fatalf("n=%d: chunks cover %d", n, next)
		}
	}
	if len(texts) > exactChunk+9 {
		t.Fatalf("%d distinct chunk sizes, want at most %d", len(texts), exactChunk+9)
	}
}
