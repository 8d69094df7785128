package postgres

import "time"

// SetGroupStall sets groupStall for a test and returns the restore.
func SetGroupStall(d time.Duration) (restore func()) {
	old := groupStall
	groupStall = d
	return func() { groupStall = old }
}
