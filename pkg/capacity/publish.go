package capacity

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// DefaultPeriod is how often the counts are made.
const DefaultPeriod = 5 * time.Second

// ModelServings is the resource the publisher reads and patches.
var ModelServings = schema.GroupVersionResource{Group: workloadv1alpha1.SchemeGroupVersion.Group, Version: workloadv1alpha1.SchemeGroupVersion.Version, Resource: "modelservings"}

var groupsThatFit = metrics.NewGaugeVec(&metrics.GaugeOpts{
	Subsystem:      "berth_capacity",
	Name:           "groups_that_fit",
	Help:           "How many more whole ServingGroups of the ModelServing's current template the cluster can place now, as last published (capped).",
	StabilityLevel: metrics.ALPHA,
}, []string{"namespace", "modelserving"})

var roleReplicasThatFit = metrics.NewGaugeVec(&metrics.GaugeOpts{
	Subsystem:      "berth_capacity",
	Name:           "role_replicas_that_fit",
	Help:           "How many more replicas of the role every placed ServingGroup of the ModelServing can take now, inside its domain, as last counted (capped; ModelServings of more than one role).",
	StabilityLevel: metrics.ALPHA,
}, []string{"namespace", "modelserving", "role"})

func init() { legacyregistry.MustRegister(groupsThatFit, roleReplicasThatFit) }

// Publisher counts, every Period, the groups that fit for each ModelServing placed by
// Scheduler and writes the count on it (GroupsThatFitAnnotation).
type Publisher struct {
	Scheduler string
	Period    time.Duration
	Limit     int // 0: DefaultLimit
	// Nodes and Pods are the scheduler's informer stores; ModelServings an informer store of
	// unstructured ModelServings.
	Nodes, Pods, ModelServings cache.Store
	// Model is the profile's placement model (accelerator rules, DRA view, domain choice).
	Model  *placement.Model
	Client dynamic.Interface
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// TTL is how long a published count is vouched for: six periods. It is written again when
// half of that has passed (see due), so an unchanged count costs one patch per three
// periods, a slow round or a lost patch does not make the autoscaler blind, and a stopped
// scheduler's count is ignored within six periods.
func (p *Publisher) TTL() time.Duration { return 6 * p.Period }

// Run publishes until ctx ends.
func (p *Publisher) Run(ctx context.Context) {
	log := klog.FromContext(ctx).WithName("capacity")
	t := time.NewTicker(p.Period)
	defer t.Stop()
	for {
		if err := p.Once(ctx); err != nil {
			log.V(2).Info("publishing groups that fit", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once counts and publishes one round.
func (p *Publisher) Once(ctx context.Context) error {
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	var c Cluster
	for _, o := range p.Nodes.List() {
		if n, ok := o.(*corev1.Node); ok {
			c.Nodes = append(c.Nodes, n)
		}
	}
	for _, o := range p.Pods.List() {
		if pod, ok := o.(*corev1.Pod); ok {
			c.Pods = append(c.Pods, pod)
		}
	}
	c.Model = p.Model
	var counter *Counter
	var firstErr error
	withPods := groupsWithPods(c.Pods)
	for _, o := range p.ModelServings.List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var ms workloadv1alpha1.ModelServing
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ms); err != nil {
			continue
		}
		if ms.Spec.SchedulerName != p.Scheduler || ms.DeletionTimestamp != nil {
			continue
		}
		if counter == nil {
			counter = NewCounter(c)
		}
		replicas := int32(1)
		if ms.Spec.Replicas != nil {
			replicas = *ms.Spec.Replicas
		}
		// Groups the ModelServing has in spec but whose pods do not exist yet (just scaled
		// up) will take capacity the pods cannot show yet.
		missing := max(0, int(replicas)-len(withPods[types.NamespacedName{Namespace: ms.Namespace, Name: ms.Name}]))
		n := max(0, counter.Fits(&ms, limit+missing)-missing)
		groupsThatFit.WithLabelValues(ms.Namespace, ms.Name).Set(float64(n))
		roles := ""
		if len(ms.Spec.Template.Roles) > 1 {
			roles = roleCounts(counter, &ms, limit)
		}
		if !p.due(&ms, n, replicas, roles, now) {
			continue
		}
		if err := p.patch(ctx, &ms, n, replicas, roles, now); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// due says whether the published value must be written: the count changed, or less than
// half of its vouched time remains.
func (p *Publisher) due(ms *workloadv1alpha1.ModelServing, n int, replicas int32, roles string, now time.Time) bool {
	if ms.Annotations[workloadv1alpha1.GroupsThatFitAnnotation] != strconv.Itoa(n) ||
		ms.Annotations[workloadv1alpha1.GroupsThatFitReplicasAnnotation] != strconv.Itoa(int(replicas)) ||
		ms.Annotations[workloadv1alpha1.RoleReplicasThatFitAnnotation] != roles {
		return true
	}
	until, err := time.Parse(time.RFC3339Nano, ms.Annotations[workloadv1alpha1.GroupsThatFitUntilAnnotation])
	return err != nil || until.Sub(now) < p.TTL()/2
}

func (p *Publisher) patch(ctx context.Context, ms *workloadv1alpha1.ModelServing, n int, replicas int32, roles string, now time.Time) error {
	annotations := map[string]any{
		workloadv1alpha1.GroupsThatFitAnnotation:         strconv.Itoa(n),
		workloadv1alpha1.GroupsThatFitReplicasAnnotation: strconv.Itoa(int(replicas)),
		workloadv1alpha1.GroupsThatFitUntilAnnotation:    now.Add(p.TTL()).UTC().Format(time.RFC3339Nano),
		workloadv1alpha1.RoleReplicasThatFitAnnotation:   roles,
	}
	if roles == "" {
		annotations[workloadv1alpha1.RoleReplicasThatFitAnnotation] = nil // a merge patch's null removes it
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = p.Client.Resource(ModelServings).Namespace(ms.Namespace).Patch(ctx, ms.Name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

// groupsWithPods is, per ModelServing, the set of its ServingGroups that have a pod that is
// not finished: one pass over the pods per round, not one per ModelServing.
func groupsWithPods(pods []*corev1.Pod) map[types.NamespacedName]map[string]bool {
	out := map[types.NamespacedName]map[string]bool{}
	for _, p := range pods {
		ms := p.Labels[workloadv1alpha1.ModelServingNameLabel]
		if ms == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		key := types.NamespacedName{Namespace: p.Namespace, Name: ms}
		if out[key] == nil {
			out[key] = map[string]bool{}
		}
		out[key][p.Labels[workloadv1alpha1.GroupNameLabel]] = true
	}
	return out
}

// roleFit is one role's entry in RoleReplicasThatFitAnnotation.
type roleFit struct {
	Fit      int `json:"fit"`
	Replicas int `json:"replicas"`
	// Alongside holds, for each role named after this one, how many more of it fit with
	// 0, 1, … Fit more of this one.
	Alongside map[string][]int `json:"alongside,omitempty"`
}

// roleCounts is the RoleReplicasThatFitAnnotation value for ms: every role's count, and
// for each pair of roles the counts that fit together (keys sorted, so an unchanged count
// is an unchanged string).
func roleCounts(c *Counter, ms *workloadv1alpha1.ModelServing, limit int) string {
	roles := ms.Spec.Template.Roles
	fits, alongside := c.roleCounts(ms, limit)
	out := map[string]roleFit{}
	for ri := range roles {
		f := roleFit{Fit: fits[ri], Replicas: roleReplicas(&roles[ri])}
		for rj, along := range alongside[ri] {
			if f.Alongside == nil {
				f.Alongside = map[string][]int{}
			}
			f.Alongside[roles[rj].Name] = along
		}
		out[roles[ri].Name] = f
		roleReplicasThatFit.WithLabelValues(ms.Namespace, ms.Name, roles[ri].Name).Set(float64(f.Fit))
	}
	b, _ := json.Marshal(out) // maps marshal with sorted keys
	return string(b)
}
