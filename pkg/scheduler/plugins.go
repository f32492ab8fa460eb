package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/berth-sh/berth/pkg/capacity"
	"github.com/berth-sh/berth/pkg/plugins/accelerator"
	"github.com/berth-sh/berth/pkg/plugins/gang"
	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/topology"
)

// Plugins registers Berth's out-of-tree plugins with kube-scheduler. Each call builds a
// new set of placement models, one per profile, that the three plugins of a profile share:
// the accelerator plugin hands it the profile's classes, the topology plugin its domain
// choice, and the gang plugin plans whole groups on it. Each profile with the gang plugin
// also publishes, every capacity.DefaultPeriod, how many groups of its ModelServings fit.
func Plugins() []app.Option {
	period := capacity.DefaultPeriod
	return plugins(&period)
}

// plugins is Plugins with the publishing period read when the profiles are built (after
// the command line is parsed); 0 or less publishes nothing.
func plugins(period *time.Duration) []app.Option {
	models := placement.NewModels()
	gangFactory := gang.Factory(models)
	var mu sync.Mutex
	started := map[fwk.Handle]bool{}
	return []app.Option{
		app.WithPlugin(gang.Name, func(ctx context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
			pl, err := gangFactory(ctx, obj, handle)
			if err != nil || *period <= 0 {
				return pl, err
			}
			mu.Lock()
			defer mu.Unlock()
			if !started[handle] {
				m, err := models.For(handle)
				if err != nil {
					return nil, err
				}
				if err := startCapacity(ctx, handle, m, *period); err != nil {
					return nil, err
				}
				started[handle] = true
			}
			return pl, nil
		}),
		app.WithPlugin(topology.Name, topology.Factory(models)),
		app.WithPlugin(accelerator.Name, accelerator.Factory(models)),
	}
}

// startCapacity runs the profile's groups-that-fit publisher (pkg/capacity) beside the
// scheduler, off its scheduling path: it reads the scheduler's own node and pod informers
// and the profile's accelerator rules, and patches the profile's ModelServings.
func startCapacity(ctx context.Context, handle fwk.Handle, m *placement.Model, period time.Duration) error {
	dc, err := dynamic.NewForConfig(placement.JSONConfig(handle))
	if err != nil {
		return fmt.Errorf("capacity: dynamic client: %w", err)
	}
	f := handle.SharedInformerFactory()
	nodes, pods := f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer()
	df := dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)
	ms := df.ForResource(capacity.ModelServings).Informer()
	p := &capacity.Publisher{
		Scheduler: handle.ProfileName(), Period: period,
		Nodes: nodes.GetStore(), Pods: pods.GetStore(), ModelServings: ms.GetStore(),
		Model: m, Client: dc,
	}
	go func() {
		df.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, pods.HasSynced, ms.HasSynced) {
			return
		}
		klog.FromContext(ctx).Info("publishing groups that fit", "profile", handle.ProfileName(), "period", period)
		p.Run(ctx)
	}()
	return nil
}
