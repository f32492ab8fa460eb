//go:build !race

package gang

// raceTimeScale is 1 without the race detector: the bounds are the ones the docs state.
const raceTimeScale = 1
