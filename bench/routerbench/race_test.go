//go:build race

package main

// raceDetector: the test binary runs under the race detector, whose instrumentation makes
// the code several times slower, so rates measured in it say nothing about berth-router's.
const raceDetector = true
