// Package scheduler embeds berth-scheduler's shipped KubeSchedulerConfiguration, so the
// sandbox, the tests and the benchmarks run exactly the profile an operator installs.
package scheduler

import _ "embed"

// Config is manifests/scheduler/config.yaml.
//
//go:embed config.yaml
var Config []byte
