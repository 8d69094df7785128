// Package ids makes the platform's identifiers: a short prefix naming the kind
// of object and a UUIDv7, so ids sort by creation time (handy in indexes and
// when reading logs) and never collide across replicas.
package ids

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

// New returns prefix + "_" + a time-ordered UUIDv7 without dashes,
// e.g. "run_019a7c0e3f2a7b8c9d0e1f2a3b4c5d6e".
func New(prefix string) string {
	u := uuid.Must(uuid.NewV7())
	var b strings.Builder
	b.Grow(len(prefix) + 33)
	b.WriteString(prefix)
	b.WriteByte('_')
	var buf [32]byte
	hex.Encode(buf[:], u[:])
	b.Write(buf[:])
	return b.String()
}

// Secret returns a random secret for API keys: prefix + 32 random bytes in hex.
func Secret(prefix string) string {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return prefix + hex.EncodeToString(raw[:])
}
