// Command berth-scheduler is kube-scheduler with Berth's gang, topology and accelerator
// plugins. Run it with --config pointing at manifests/scheduler/config.yaml.
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/berth-sh/berth/pkg/scheduler"
)

func main() {
	os.Exit(cli.Run(scheduler.NewCommand()))
}
