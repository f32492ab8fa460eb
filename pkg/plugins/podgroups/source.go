package podgroups

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	coschedulingv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	coschedulingclient "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"
	coschedulinginformers "sigs.k8s.io/scheduler-plugins/pkg/generated/informers/externalversions"
	coschedulinglisters "sigs.k8s.io/scheduler-plugins/pkg/generated/listers/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"
	volcanoinformers "volcano.sh/apis/pkg/client/informers/externalversions"
	volcanolisters "volcano.sh/apis/pkg/client/listers/scheduling/v1beta1"
)

// Source reads every gang API the cluster serves through informers of its own and hands
// the gang rules one shape: Volcano's PodGroup. Volcano's API is always read (it is Berth's
// own contract); scheduler-plugins' when its CRD is installed and kube-scheduler's native
// PodGroup when the apiserver serves scheduling.k8s.io/v1beta1, both as found at start.
type Source struct {
	vc      volcanoclient.Interface
	volcano volcanolisters.PodGroupLister
	cc      coschedulingclient.Interface
	cosched coschedulinglisters.PodGroupLister // nil: the CRD is not installed
	kube    kubernetes.Interface
	native  schedulinglisters.PodGroupLister // nil: the API is not served

	mu        sync.Mutex
	converted map[string]convertedGroup // key -> the last conversion
	handlers  []func(key string, specChanged bool)
	onDelete  []func(key string)
}

// convertedGroup caches a conversion by the source object's resourceVersion.
type convertedGroup struct {
	version string
	pg      *volcanov1beta1.PodGroup
}

// Start builds the source from a JSON client config, starts its informers and waits for
// them to sync.
func Start(ctx context.Context, cfg *rest.Config) (*Source, error) {
	logger := klog.FromContext(ctx)
	s := &Source{converted: map[string]convertedGroup{}}
	var err error
	if s.vc, err = volcanoclient.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("podgroups: volcano client: %w", err)
	}
	if s.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("podgroups: client: %w", err)
	}
	if s.cc, err = coschedulingclient.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("podgroups: scheduler-plugins client: %w", err)
	}

	vf := volcanoinformers.NewSharedInformerFactory(s.vc, 0)
	vinf := vf.Scheduling().V1beta1().PodGroups()
	s.volcano = vinf.Lister()
	if err := s.watch(vinf.Informer(), Volcano); err != nil {
		return nil, err
	}
	vf.Start(ctx.Done())
	syncs := []func() error{func() error { return waitSynced(ctx, vf.WaitForCacheSync(ctx.Done())) }}

	if served(s.kube, coschedulingv1alpha1.SchemeGroupVersion.String()) {
		cf := coschedulinginformers.NewSharedInformerFactory(s.cc, 0)
		cinf := cf.Scheduling().V1alpha1().PodGroups()
		s.cosched = cinf.Lister()
		if err := s.watch(cinf.Informer(), Coscheduling); err != nil {
			return nil, err
		}
		cf.Start(ctx.Done())
		syncs = append(syncs, func() error { return waitSynced(ctx, cf.WaitForCacheSync(ctx.Done())) })
		logger.Info("Reading scheduler-plugins PodGroups", "groupVersion", coschedulingv1alpha1.SchemeGroupVersion.String())
	}
	if served(s.kube, schedulingv1beta1.SchemeGroupVersion.String()) {
		nf := informers.NewSharedInformerFactory(s.kube, 0)
		ninf := nf.Scheduling().V1beta1().PodGroups()
		s.native = ninf.Lister()
		if err := s.watch(ninf.Informer(), Workload); err != nil {
			return nil, err
		}
		nf.Start(ctx.Done())
		syncs = append(syncs, func() error { return waitSynced(ctx, nf.WaitForCacheSync(ctx.Done())) })
		logger.Info("Reading kube-scheduler's native PodGroups", "groupVersion", schedulingv1beta1.SchemeGroupVersion.String())
	}
	for _, wait := range syncs {
		if err := wait(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func waitSynced[T comparable](ctx context.Context, synced map[T]bool) error {
	for typ, ok := range synced {
		if !ok {
			return fmt.Errorf("podgroups: %v informer did not sync: %v", typ, ctx.Err())
		}
	}
	return nil
}

// served reports whether the apiserver serves PodGroups in the group version.
func served(kube kubernetes.Interface, gv string) bool {
	list, err := kube.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == "podgroups" {
			return true
		}
	}
	return false
}

// watch tells the handlers of every group that appears or changes.
func (s *Source) watch(inf cache.SharedIndexInformer, api API) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if key, _, ok := keyAndSpec(api, obj); ok {
				s.notify(key, true)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			key, newSpec, ok := keyAndSpec(api, newObj)
			_, oldSpec, ok2 := keyAndSpec(api, oldObj)
			if ok && ok2 {
				// Status writes (Volcano's CRD has no status subresource, so they bump its
				// generation) change nothing the rules read.
				s.notify(key, !equality.Semantic.DeepEqual(oldSpec, newSpec))
			}
		},
		// A deleted group's conversion is dropped here, and whoever keeps state per group
		// is told, so nothing is remembered of a group that is gone.
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if key, _, ok := keyAndSpec(api, obj); ok {
				s.Forget(key)
				s.mu.Lock()
				hs := s.onDelete
				s.mu.Unlock()
				for _, h := range hs {
					h(key)
				}
			}
		},
	})
	return err
}

func keyAndSpec(api API, obj any) (string, any, bool) {
	switch o := obj.(type) {
	case *volcanov1beta1.PodGroup:
		return Ref{API: api, Namespace: o.Namespace, Name: o.Name}.Key(), o.Spec, true
	case *coschedulingv1alpha1.PodGroup:
		return Ref{API: api, Namespace: o.Namespace, Name: o.Name}.Key(), o.Spec, true
	case *schedulingv1beta1.PodGroup:
		return Ref{API: api, Namespace: o.Namespace, Name: o.Name}.Key(), o.Spec, true
	}
	return "", nil, false
}

func (s *Source) notify(key string, specChanged bool) {
	s.mu.Lock()
	hs := s.handlers
	s.mu.Unlock()
	for _, h := range hs {
		h(key, specChanged)
	}
}

// OnChange registers f to learn of every group that appears (specChanged true) or changes.
func (s *Source) OnChange(f func(key string, specChanged bool)) {
	s.mu.Lock()
	s.handlers = append(s.handlers, f)
	s.mu.Unlock()
}

// OnDelete registers f to learn of every group that is deleted.
func (s *Source) OnDelete(f func(key string)) {
	s.mu.Lock()
	s.onDelete = append(s.onDelete, f)
	s.mu.Unlock()
}

// Get returns the pod's group in Volcano's shape, or an error saying why there is none.
func (s *Source) Get(pod *corev1.Pod) (*volcanov1beta1.PodGroup, error) {
	ref, ok := Of(pod)
	if !ok {
		return nil, fmt.Errorf("pod %s/%s names no PodGroup", pod.Namespace, pod.Name)
	}
	return s.Lookup(ref)
}

// GetKey returns the group a key names.
func (s *Source) GetKey(key string) (*volcanov1beta1.PodGroup, error) {
	ref, err := ParseKey(key)
	if err != nil {
		return nil, err
	}
	return s.Lookup(ref)
}

// Lookup returns the group in Volcano's shape. Conversions are cached per resourceVersion,
// so a converted group is the same object until its source changes.
func (s *Source) Lookup(ref Ref) (*volcanov1beta1.PodGroup, error) {
	switch ref.API {
	case Coscheduling:
		if s.cosched == nil {
			return nil, fmt.Errorf("%s is not served: install the scheduler-plugins PodGroup CRD and restart berth-scheduler", ref.API)
		}
		obj, err := s.cosched.PodGroups(ref.Namespace).Get(ref.Name)
		if err != nil {
			return nil, err
		}
		return s.cached(ref.Key(), obj.ResourceVersion, func() *volcanov1beta1.PodGroup { return FromCoscheduling(obj) }), nil
	case Workload:
		if s.native == nil {
			return nil, fmt.Errorf("%s is not served: enable the GenericWorkload feature gate and the scheduling.k8s.io/v1beta1 API on the apiserver and restart berth-scheduler", ref.API)
		}
		obj, err := s.native.PodGroups(ref.Namespace).Get(ref.Name)
		if err != nil {
			return nil, err
		}
		return s.cached(ref.Key(), obj.ResourceVersion, func() *volcanov1beta1.PodGroup { return FromWorkload(obj) }), nil
	default:
		return s.volcano.PodGroups(ref.Namespace).Get(ref.Name)
	}
}

func (s *Source) cached(key, version string, convert func() *volcanov1beta1.PodGroup) *volcanov1beta1.PodGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.converted[key]; ok && c.version == version {
		return c.pg
	}
	pg := convert()
	s.converted[key] = convertedGroup{version: version, pg: pg}
	return pg
}

// Forget drops the cached conversion of a group whose pods or PodGroup are gone.
func (s *Source) Forget(key string) {
	s.mu.Lock()
	delete(s.converted, key)
	s.mu.Unlock()
}

// Converted lists the groups whose conversion is cached (groups of the coscheduling and
// native APIs that were read), so a caller can check them against the groups that exist.
func (s *Source) Converted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.converted))
	for k := range s.converted {
		out = append(out, k)
	}
	return out
}

// Volcano returns the Volcano client and lister, for the status Berth writes on its own
// contract's PodGroups.
func (s *Source) Volcano() (volcanoclient.Interface, volcanolisters.PodGroupLister) {
	return s.vc, s.volcano
}
