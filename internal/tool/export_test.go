package tool

import "time"

// SetDecideTimeout replaces DecideTimeout for a test and returns the function
// that restores it. Tests using it must not run in parallel.
func SetDecideTimeout(d time.Duration) (restore func()) {
	old := decideTimeout
	decideTimeout = d
	return func() { decideTimeout = old }
}
