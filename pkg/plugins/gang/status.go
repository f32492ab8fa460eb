package gang

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"
	volcanolisters "volcano.sh/apis/pkg/client/listers/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// Condition reasons the plugin writes on PodGroups and in events.
const (
	reasonNotEnoughResources = volcanov1beta1.NotEnoughResourcesReason
	reasonTimeout            = "WaitTimeout"
	reasonScheduled          = "GangScheduled"
	// reasonAllocationDiffers: the DynamicResources plugin allocated a pod's claims other
	// devices than the group's plan chose (see PostBind).
	reasonAllocationDiffers = "AllocationDiffersFromPlan"
)

// ReservationAnnotation is set on the PodGroup of the oldest blocked group while capacity
// is kept for it: a JSON object from node name to the resources kept there, e.g.
// {"gpu-3":{"nvidia.com/gpu":"8"}}. Other groups may not use that capacity.
const ReservationAnnotation = "gang.berth.sh/reservation"

// statusSettleDelay is how long after a group is released its status is written.
const statusSettleDelay = time.Second

// statusWriter keeps PodGroup status current off the scheduling hot path: decisions are
// recorded in memory and a worker writes the status derived from them and from the pods.
type statusWriter struct {
	groups   *podgroups.Source
	client   volcanoclient.Interface
	lister   volcanolisters.PodGroupLister
	model    *placement.Model
	recorder events.EventRecorderLogger
	queue    workqueue.TypedRateLimitingInterface[string]

	mu        sync.Mutex
	decisions map[string]decision
}

// decision is the plugin's latest verdict on a group.
type decision struct {
	scheduled bool
	reason    string
	message   string
}

func newStatusWriter(groups *podgroups.Source, model *placement.Model, recorder events.EventRecorderLogger) *statusWriter {
	client, lister := groups.Volcano()
	return &statusWriter{
		groups:    groups,
		client:    client,
		lister:    lister,
		model:     model,
		recorder:  recorder,
		queue:     workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		decisions: map[string]decision{},
	}
}

func (w *statusWriter) enqueue(key string) { w.queue.Add(key) }

// enqueueSettled writes the group's status after statusSettleDelay; a request while one is
// pending joins it (the delaying queue keeps the earlier time).
func (w *statusWriter) enqueueSettled(key string) { w.queue.AddAfter(key, statusSettleDelay) }

func podGroupRef(pg *volcanov1beta1.PodGroup) *corev1.ObjectReference { return podgroups.ObjectRef(pg) }

// record stores a decision and reports whether it differs from the last one, so events
// are emitted on change rather than on every retry.
func (w *statusWriter) record(key string, d decision) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := w.decisions[key] != d
	w.decisions[key] = d
	return changed
}

func (w *statusWriter) unschedulable(pg *volcanov1beta1.PodGroup, reason, msg string) {
	key := podgroups.KeyOf(pg)
	if w.record(key, decision{reason: reason, message: msg}) && w.recorder != nil {
		w.recorder.Eventf(podGroupRef(pg), nil, corev1.EventTypeWarning, reason, "Scheduling", "gang cannot be placed: %s", msg)
	}
	w.enqueue(key)
}

// preempting records that lower-priority groups are being evicted for the group.
func (w *statusWriter) preempting(pg *volcanov1beta1.PodGroup, msg string) {
	key := podgroups.KeyOf(pg)
	if w.record(key, decision{reason: reasonPreempting, message: msg}) && w.recorder != nil {
		w.recorder.Eventf(podGroupRef(pg), nil, corev1.EventTypeNormal, reasonPreempting, "Preempting", "%s", msg)
	}
	w.enqueue(key)
}

// preempted records that the group was evicted for a higher-priority one.
func (w *statusWriter) preempted(pg *volcanov1beta1.PodGroup, msg string) {
	key := podgroups.KeyOf(pg)
	if w.record(key, decision{reason: reasonPreempted, message: msg}) && w.recorder != nil {
		w.recorder.Eventf(podGroupRef(pg), nil, corev1.EventTypeWarning, reasonPreempted, "Preempting", "%s", msg)
	}
	w.enqueue(key)
}

// scheduled records a released group. It emits no event of its own: each pod already gets
// the scheduler's Scheduled event, the PodGroup's Scheduled condition records the release,
// and measured on the upstream gang workloads one more API write per group cost about a
// tenth of the throughput (bench/README.md). Failures, which need explaining, do get events.
func (w *statusWriter) scheduled(pg *volcanov1beta1.PodGroup) {
	key := podgroups.KeyOf(pg)
	w.record(key, decision{scheduled: true, reason: reasonScheduled})
	// The released pods bind over the next moments; one write after that, showing them
	// placed, costs the apiserver less than one per bind.
	w.enqueueSettled(key)
}

func (w *statusWriter) run(ctx context.Context) {
	defer w.queue.ShutDown()
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for w.processNext(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (w *statusWriter) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.sync(ctx, key); err != nil {
		klog.FromContext(ctx).V(2).Info("PodGroup status update failed; retrying", "podGroup", key, "err", err)
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// forget drops the decision about a group whose PodGroup is gone.
func (w *statusWriter) forget(key string) {
	w.mu.Lock()
	delete(w.decisions, key)
	w.mu.Unlock()
}

// keys lists the groups a decision is kept for.
func (w *statusWriter) keys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return placement.SortedKeys(w.decisions)
}

func (w *statusWriter) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.decisions)
}

// sync writes the status derived from the group's pods and the latest decision: on a Volcano
// PodGroup with the reservation annotation, on the other APIs in their own shape.
func (w *statusWriter) sync(ctx context.Context, key string) error {
	ref, err := podgroups.ParseKey(key)
	if err != nil {
		return nil
	}
	w.mu.Lock()
	d := w.decisions[key]
	w.mu.Unlock()
	if ref.API != podgroups.Volcano {
		pg, err := w.groups.Lookup(ref)
		if apierrors.IsNotFound(err) {
			w.forget(key)
			return nil
		}
		if err != nil {
			return err
		}
		return w.groups.WriteStatus(ctx, ref, desiredStatus(pg, w.model.GroupPods(key), d, time.Now()))
	}
	ns, name := ref.Namespace, ref.Name

	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pg, err := w.lister.PodGroups(ns).Get(name)
		if apierrors.IsNotFound(err) {
			w.forget(key)
			return nil
		}
		if err != nil {
			return err
		}
		pods := w.model.GroupPods(key)
		want := desiredStatus(pg, pods, d, time.Now())
		reservation := reservationAnnotation(w.model.Reservation(key))
		if statusEqual(pg.Status, want) && pg.Annotations[ReservationAnnotation] == reservation {
			return nil
		}
		updated := pg.DeepCopy()
		updated.Status = want
		setReservation(updated, reservation)
		// Volcano's PodGroup CRD has no status subresource, so status goes with the object.
		_, err = w.client.SchedulingV1beta1().PodGroups(ns).Update(ctx, updated, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			// Read the newest object straight from the API so the retry does not race the informer.
			if fresh, gerr := w.client.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil {
				fresh.Status = desiredStatus(fresh, pods, d, time.Now())
				setReservation(fresh, reservation)
				_, err = w.client.SchedulingV1beta1().PodGroups(ns).Update(ctx, fresh, metav1.UpdateOptions{})
			}
		}
		return err
	})
}

// desiredStatus derives phase, pod counts and conditions. Phase follows Volcano: Running
// once minMember pods are placed, Pending before.
func desiredStatus(pg *volcanov1beta1.PodGroup, pods []*corev1.Pod, d decision, now time.Time) volcanov1beta1.PodGroupStatus {
	var placed, running, succeeded, failed int32
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			placed++
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			running++
		case corev1.PodSucceeded:
			succeeded++
		case corev1.PodFailed:
			failed++
		}
	}
	st := volcanov1beta1.PodGroupStatus{Running: running, Succeeded: succeeded, Failed: failed, Phase: volcanov1beta1.PodGroupPending}
	// A preempted group's pods are on their way out: the scheduler's pod cache may still
	// show them bound for a moment after the evictions, and the status must say what
	// happened, not what the cache has not caught up with. A newer verdict (the group placed
	// again, or refused) replaces this one.
	preempted := d.reason == reasonPreempted
	placedMin := placed >= pg.Spec.MinMember && placed > 0 && !preempted
	if placedMin {
		st.Phase = volcanov1beta1.PodGroupRunning
	}
	var conds []volcanov1beta1.PodGroupCondition
	switch {
	case preempted:
		conds = append(conds, condition(pg, volcanov1beta1.PodGroupUnschedulableType, corev1.ConditionTrue, d.reason, d.message, now))
	case placedMin || d.scheduled:
		conds = append(conds, condition(pg, volcanov1beta1.PodGroupScheduled, corev1.ConditionTrue, reasonScheduled,
			fmt.Sprintf("%d/%d pods placed", placed, pg.Spec.MinMember), now))
		conds = append(conds, condition(pg, volcanov1beta1.PodGroupUnschedulableType, corev1.ConditionFalse, reasonScheduled, "", now))
	case d.message != "":
		conds = append(conds, condition(pg, volcanov1beta1.PodGroupUnschedulableType, corev1.ConditionTrue, d.reason, d.message, now))
	}
	st.Conditions = conds
	return st
}

// condition builds a condition, keeping the transition time when the status did not change.
func condition(pg *volcanov1beta1.PodGroup, typ volcanov1beta1.PodGroupConditionType, status corev1.ConditionStatus, reason, msg string, now time.Time) volcanov1beta1.PodGroupCondition {
	c := volcanov1beta1.PodGroupCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(now)}
	for _, old := range pg.Status.Conditions {
		if old.Type == typ && old.Status == status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	return c
}

func statusEqual(a, b volcanov1beta1.PodGroupStatus) bool {
	if a.Phase != b.Phase || a.Running != b.Running || a.Succeeded != b.Succeeded || a.Failed != b.Failed || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	return true
}

// reservationAnnotation renders what is kept for a group, "" for nothing.
func reservationAnnotation(kept map[string]placement.Resources) string {
	if len(kept) == 0 {
		return ""
	}
	out := make(map[string]map[string]string, len(kept))
	for node, r := range kept {
		m := map[string]string{}
		for name, v := range r {
			if v > 0 && name != corev1.ResourcePods {
				q := placement.Quantity(name, v)
				m[string(name)] = q.String()
			}
		}
		out[node] = m
	}
	b, err := json.Marshal(out)
	if err != nil {
		return ""
	}
	return string(b)
}

func setReservation(pg *volcanov1beta1.PodGroup, value string) {
	if value == "" {
		delete(pg.Annotations, ReservationAnnotation)
		return
	}
	if pg.Annotations == nil {
		pg.Annotations = map[string]string{}
	}
	pg.Annotations[ReservationAnnotation] = value
}
