//go:build race

package index

// raceEnabled: under the race detector the store runs ten times slower,
// so the largest hostile counts are only run without it.
const raceEnabled = true
