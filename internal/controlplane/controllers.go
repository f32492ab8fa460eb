package controlplane

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/disruption"
	"k8s.io/kubernetes/pkg/controller/endpointslice"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	"k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
)

// The kube-controller-manager loops a cluster runs that Berth's users (and tests) rely on:
// owner references are honoured (garbage collector), a deleted namespace is emptied and goes
// away (namespace controller), a plain Deployment gets its ReplicaSet and pods, a pod's
// ResourceClaimTemplates become its ResourceClaims, released and deleted when the pod ends so
// its DRA devices are free again (ResourceClaim controller), and a Service with a selector
// gets EndpointSlices listing its Ready pods (what a gateway reads to reach a Service
// backend), and a PodDisruptionBudget's status says how many evictions it allows (the
// disruption controller: without it the Eviction API refuses every eviction a budget covers,
// as it cannot tell whether the budget allows it). They are
// kube-controller-manager's own controllers from k8s.io/kubernetes, wired the way its
// controller descriptors wire them, not a copy; only their periods are shorter, so a test
// sees a CRD installed mid-run collected within seconds.
const (
	// discoveryResyncPeriod is how often the garbage collector looks for new resources
	// (kube-controller-manager: 30 s).
	discoveryResyncPeriod = 5 * time.Second
	// controllerWorkers is every controller's worker count (kube-controller-manager: 5-20).
	controllerWorkers = 5
	// controllersStopTimeout bounds waiting for the controllers to return on Stop.
	controllersStopTimeout = 10 * time.Second
)

// controllers are the running kube-controller-manager loops.
type controllers struct {
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// startControllers starts the garbage collector, the namespace, Deployment, ReplicaSet,
// ResourceClaim, EndpointSlice and disruption controllers against cfg. They run until stop.
func startControllers(ctx context.Context, logger klog.Logger, cfg *rest.Config) (*controllers, error) {
	cfg = rest.CopyConfig(cfg)
	// Deleting a namespace's contents and collecting garbage are bursts of calls; the client's
	// default 5 qps would make a test's cleanup take seconds (kube-controller-manager raises
	// the namespace controller's limits the same way).
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.UserAgent = "kube-controller-manager (berth controlplane)"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// The caller's ctx bounds startup only; the controllers live until stop.
	ctx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger.WithName("kube-controller-manager")))
	c := &controllers{cancel: cancel}

	typed := informers.NewSharedInformerFactory(kube, 0)
	untyped := metadatainformer.NewSharedInformerFactory(meta, 0)
	informersStarted := make(chan struct{})

	// The garbage collector's mapper must not share the discovery client Sync uses (see
	// GarbageCollector.Sync).
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	gc, err := garbagecollector.NewGarbageCollector(ctx, kube, meta, mapper,
		garbagecollector.DefaultIgnoredResources(), informerfactory.NewInformerFactory(typed, untyped), informersStarted)
	if err != nil {
		c.cancel()
		return nil, fmt.Errorf("garbage collector: %w", err)
	}
	namespaces := namespace.NewNamespaceController(ctx, kube, meta, kube.Discovery().ServerPreferredNamespacedResources,
		typed.Core().V1().Namespaces(), 5*time.Minute, corev1.FinalizerKubernetes)
	deployments, err := deployment.NewDeploymentController(ctx, typed.Apps().V1().Deployments(),
		typed.Apps().V1().ReplicaSets(), typed.Core().V1().Pods(), kube)
	if err != nil {
		c.cancel()
		return nil, fmt.Errorf("deployment controller: %w", err)
	}
	replicaSets := replicaset.NewReplicaSetController(ctx, typed.Apps().V1().ReplicaSets(),
		typed.Core().V1().Pods(), kube, replicaset.BurstReplicas)
	// Creates a pod's claims from its templates, takes an ended pod out of a claim's
	// reservedFor and deletes the claims made for it, so the devices the scheduler allocated
	// go back to the pool. kube-controller-manager starts it whenever DynamicResourceAllocation
	// is on (GA, on by default in 1.37). The PodGroup informer is only read with the alpha
	// workload-claims gates, which stay off here.
	claims, err := resourceclaim.NewController(klog.FromContext(ctx), kube, typed.Core().V1().Pods(),
		typed.Scheduling().V1beta1().PodGroups(), typed.Resource().V1().ResourceClaims(), typed.Resource().V1().ResourceClaimTemplates())
	if err != nil {
		c.cancel()
		return nil, fmt.Errorf("resource claim controller: %w", err)
	}
	// kube-controller-manager's defaults: 100 endpoints per slice, updates batched for 0 s.
	slices := endpointslice.NewController(ctx, typed.Core().V1().Pods(), typed.Core().V1().Services(), typed.Core().V1().Nodes(),
		typed.Discovery().V1().EndpointSlices(), 100, kube, 0)
	// Fills each PodDisruptionBudget's status (currentHealthy, disruptionsAllowed) that the
	// Eviction API decides by. A budget given as a percentage or maxUnavailable reads its
	// pods' controller's scale subresource, found through its own discovery-backed mapper.
	scaleMapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	scales, err := scale.NewForConfig(cfg, scaleMapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(kube.Discovery()))
	if err != nil {
		c.cancel()
		return nil, fmt.Errorf("disruption controller: %w", err)
	}
	budgets := disruption.NewDisruptionController(ctx, typed.Core().V1().Pods(), typed.Policy().V1().PodDisruptionBudgets(),
		typed.Core().V1().ReplicationControllers(), typed.Apps().V1().ReplicaSets(), typed.Apps().V1().Deployments(),
		typed.Apps().V1().StatefulSets(), kube, scaleMapper, scales, kube.Discovery())
	// Fills the aggregated ClusterRoles (admin, edit, view) from the roles that carry their
	// aggregate-to labels, such as Berth's.
	aggregation := clusterroleaggregation.NewClusterRoleAggregation(typed.Rbac().V1().ClusterRoles(), kube.RbacV1())

	// Informers start after every controller asked for its own, as in kube-controller-manager.
	typed.Start(ctx.Done())
	untyped.Start(ctx.Done())
	close(informersStarted)

	run := func(f func()) { c.running.Go(f) }
	run(func() { gc.Run(ctx, controllerWorkers, discoveryResyncPeriod) })
	run(func() { gc.Sync(ctx, kube.Discovery(), discoveryResyncPeriod) })
	run(func() { namespaces.Run(ctx, controllerWorkers) })
	run(func() { deployments.Run(ctx, controllerWorkers) })
	run(func() { replicaSets.Run(ctx, controllerWorkers) })
	run(func() { claims.Run(ctx, controllerWorkers) })
	run(func() { aggregation.Run(ctx, 1) })
	run(func() { slices.Run(ctx, controllerWorkers) })
	run(func() { budgets.Run(ctx, controllerWorkers) })
	run(func() { <-ctx.Done(); typed.Shutdown(); untyped.Shutdown() })
	return c, nil
}

// stop stops the controllers and waits (boundedly) until they have returned, so none of
// them holds a watch on the apiserver that stops next.
func (c *controllers) stop(logger klog.Logger) {
	c.cancel()
	done := make(chan struct{})
	go func() { c.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(controllersStopTimeout):
		logger.Info("Controllers did not stop in time; stopping the apiserver anyway", "timeout", controllersStopTimeout)
	}
}

// RunControllers runs the same kube-controller-manager loops against any apiserver (cfg)
// until ctx ends: for a benchmark that measures them in a process of their own.
func RunControllers(ctx context.Context, cfg *rest.Config) error {
	logger := klog.FromContext(ctx)
	c, err := startControllers(ctx, logger, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	c.stop(logger)
	return nil
}
