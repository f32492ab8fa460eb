package scheduler

import (
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/berth-sh/berth/pkg/plugins/accelerator"
	"github.com/berth-sh/berth/pkg/plugins/gang"
	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/topology"
)

// Plugins registers Berth's out-of-tree plugins with kube-scheduler. Each call builds a
// new set of placement models, one per profile, that the three plugins of a profile share:
// the accelerator plugin hands it the profile's classes, the topology plugin its domain
// choice, and the gang plugin plans whole groups on it.
func Plugins() []app.Option {
	models := placement.NewModels()
	return []app.Option{
		app.WithPlugin(gang.Name, gang.Factory(models)),
		app.WithPlugin(topology.Name, topology.Factory(models)),
		app.WithPlugin(accelerator.Name, accelerator.Factory(models)),
	}
}
