//go:build !linux

package entrylog

import "testing"

// arenaResident would return how many bytes of arena are resident; outside
// Linux the arena is heap memory and the test is skipped.
func arenaResident(t *testing.T, arena []byte) int64 {
	t.Skip("arena residency is read with mincore, on Linux only")
	return 0
}
