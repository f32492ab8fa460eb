//go:build race

package gang

// raceTimeScale stretches the harness's time bounds under the race detector. It makes
// kube-scheduler's cycles five to ten times slower here (a refused DRA gang's cycle took
// about 100 ms, a placed one about 660 ms on 2 loaded cores, against a tenth of that
// without it), and a bound that holds for the scheduler's real speed says nothing about a
// build that is only checking for data races. Every guarantee is still checked; only the
// time allowed grows.
const raceTimeScale = 3
