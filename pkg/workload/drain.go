package workload

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/workload/disruption"
)

// Node drains (docs/controller.md, "Node drains"). Every ModelServing has a
// PodDisruptionBudget that refuses each voluntary eviction of its pods, so kubectl drain, a
// cluster autoscaler or a descheduler never takes part of a ServingGroup; the reconciler
// sees the drain on the node instead and moves displaced groups whole, one at a time,
// keeping disruption.MinAvailableAnnotation's minimum of Ready groups. The evictions kubectl
// drain retries find the pods gone and it finishes.
//
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// ConditionDisruptionAllowed is the ModelServing condition that says how a drain moves its
// groups: True while it moves one, False while a drain waits (and why) or while
// disruption.MinAvailableAnnotation cannot be read. Absent when no drain touches it.
const ConditionDisruptionAllowed = "DisruptionAllowed"

// Reasons of that condition and of the drain's events.
const (
	// ReasonDrainMove: a displaced ServingGroup is deleted whole, to come back on another node.
	ReasonDrainMove = "DrainMove"
	// ReasonDrainWaiting: a displaced ServingGroup stays until the minimum allows its move.
	ReasonDrainWaiting = "DrainWaiting"
	// ReasonForeignPDB: a PodDisruptionBudget of the ModelServing's name is someone else's.
	ReasonForeignPDB = "ForeignPodDisruptionBudget"
	// ReasonInvalidMinAvailable: the annotation cannot be read; no group moves for a drain.
	ReasonInvalidMinAvailable = "InvalidMinAvailable"
)

// podNodeIndex indexes the cache's pods by spec.nodeName, so a node's drain finds the
// ModelServings with pods on it without listing every pod.
const podNodeIndex = "berth.spec.nodeName"

func indexPodsByNode(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podNodeIndex, func(obj client.Object) []string {
		if n := obj.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	})
}

// drainStarts passes the node events that change whether it is drained.
var drainStarts = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { ok, _ := disruption.Drained(e.Object.(*corev1.Node)); return ok },
	UpdateFunc: func(e event.UpdateEvent) bool {
		was, _ := disruption.Drained(e.ObjectOld.(*corev1.Node))
		is, _ := disruption.Drained(e.ObjectNew.(*corev1.Node))
		return was != is
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// modelServingsOn maps a node to the ModelServings with pods on it.
func (r *Reconciler) modelServingsOn(ctx context.Context, node client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.MatchingFields{podNodeIndex: node.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing the pods of a drained node", "node", node.GetName())
		return nil
	}
	seen := map[reconcile.Request]bool{}
	var out []reconcile.Request
	for _, p := range pods.Items {
		ref := metav1.GetControllerOf(&p)
		if ref == nil || ref.Kind != "ModelServing" || ref.APIVersion != workloadv1alpha1.SchemeGroupVersion.String() {
			continue
		}
		req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: p.Namespace, Name: ref.Name}}
		if !seen[req] {
			seen[req] = true
			out = append(out, req)
		}
	}
	return out
}

// drainReport is what a pass found of drains, for the status.
type drainReport struct {
	err      error // the annotation is unreadable
	decision disruption.Decision
	nodes    []string // drained nodes under the ModelServing's groups
}

// ensurePDB keeps the ModelServing's PodDisruptionBudget: all its pods, and a minAvailable
// of every pod it may run, so the Eviction API refuses each voluntary eviction (429). Not
// maxUnavailable: 0, which reads the owner's scale subresource, and a ModelServing's scale
// counts groups, not pods: with groups of several pods such a budget would allow evictions.
// A PodDisruptionBudget of the same name that is not the ModelServing's is left alone (a
// Warning says so): the user's budget then decides evictions.
func (r *Reconciler) ensurePDB(ctx context.Context, ms *workloadv1alpha1.ModelServing, livePods int) error {
	want := BuildPDB(ms, livePods)
	have := &policyv1.PodDisruptionBudget{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		log.FromContext(ctx).V(4).Info("creating PodDisruptionBudget", "pdb", klog.KObj(want), "minAvailable", want.Spec.MinAvailable.IntValue())
		return r.createIfMissing(ctx, want)
	}
	if err != nil {
		return err
	}
	if ref := metav1.GetControllerOf(have); ref != nil && ref.UID != ms.UID && ref.Kind == "ModelServing" && ref.Name == ms.Name {
		// Left by a deleted ModelServing of this name: adopt it rather than wait for the
		// garbage collector (as PodGroups are).
		have.OwnerReferences, have.Labels = want.OwnerReferences, want.Labels
		have.Spec.MinAvailable, have.Spec.MaxUnavailable, have.Spec.Selector = want.Spec.MinAvailable, nil, want.Spec.Selector
		return r.Update(ctx, have)
	}
	if !metav1.IsControlledBy(have, ms) {
		r.Recorder.Eventf(ms, have, corev1.EventTypeWarning, ReasonForeignPDB, actionRefuse,
			"PodDisruptionBudget %s is not this ModelServing's: it decides evictions of its pods, and a drain may take part of a ServingGroup", have.Name)
		return nil
	}
	if have.Labels[disruption.WholeGroupsLabel] == "true" && ptr.Deref(have.Spec.MinAvailable, intstr.IntOrString{}) == *want.Spec.MinAvailable &&
		have.Spec.Selector != nil && fmt.Sprint(have.Spec.Selector.MatchLabels) == fmt.Sprint(want.Spec.Selector.MatchLabels) {
		return nil
	}
	have.Labels = want.Labels
	have.Spec.MinAvailable, have.Spec.MaxUnavailable, have.Spec.Selector = want.Spec.MinAvailable, nil, want.Spec.Selector
	return r.Update(ctx, have)
}

// BuildPDB is the ModelServing's PodDisruptionBudget: named as it is, selecting its pods,
// with minAvailable the most pods it may run (its groups and a rollout's surge, or the pods
// it has when a scale-down is still under way).
func BuildPDB(ms *workloadv1alpha1.ModelServing, livePods int) *policyv1.PodDisruptionBudget {
	b := budgetFor(ms)
	most := max(livePods, expectedPods(ms)*(int(ptr.Deref(ms.Spec.Replicas, 1))+b.maxSurge))
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ms.Namespace, Name: ms.Name,
			Labels:          map[string]string{workloadv1alpha1.ModelServingNameLabel: ms.Name, disruption.WholeGroupsLabel: "true"},
			OwnerReferences: []metav1.OwnerReference{ownerRef(ms)}},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(int32(most))),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{workloadv1alpha1.ModelServingNameLabel: ms.Name}},
		},
	}
}

// drainStep moves the displaced groups Plan allows and returns what it found. Moved groups
// are deleted from groups (the pass recreates them; berth-scheduler places them on nodes
// that are not drained).
func (r *Reconciler) drainStep(ctx context.Context, ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup) (*drainReport, error) {
	val, set := ms.Annotations[disruption.MinAvailableAnnotation]
	minAvail, err := disruption.MinAvailable(val, set, int(ptr.Deref(ms.Spec.Replicas, 1)), budgetFor(ms).maxUnavailable)
	if err != nil {
		return &drainReport{err: err}, nil
	}
	drained := map[string]string{} // node → why, or "" when not drained
	var in []disruption.Group
	nodes := map[string]bool{}
	for _, idx := range sortedIndices(groups) {
		g := groups[idx]
		dg := disruption.Group{Index: idx, Ready: g.ready(ms)}
		for _, p := range g.pods {
			if p.DeletionTimestamp != nil {
				dg.Terminating = true
				continue
			}
			if p.Spec.NodeName == "" {
				continue
			}
			why, seen := drained[p.Spec.NodeName]
			if !seen {
				node := &corev1.Node{}
				if err := r.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); client.IgnoreNotFound(err) != nil {
					return nil, err
				} else if err == nil {
					if ok, w := disruption.Drained(node); ok {
						why = w
					}
				}
				drained[p.Spec.NodeName] = why
			}
			if why != "" && !slices.Contains(dg.Drained, p.Spec.NodeName) {
				dg.Drained = append(dg.Drained, p.Spec.NodeName)
				nodes[p.Spec.NodeName] = true
			}
		}
		sort.Strings(dg.Drained)
		in = append(in, dg)
	}
	rep := &drainReport{decision: disruption.Plan(in, minAvail)}
	for n := range nodes {
		rep.nodes = append(rep.nodes, n)
	}
	sort.Strings(rep.nodes)
	logger := log.FromContext(ctx)
	for _, idx := range rep.decision.Move {
		var from []string
		for _, g := range in {
			if g.Index == idx {
				for _, n := range g.Drained {
					from = append(from, fmt.Sprintf("%s (%s)", n, drained[n]))
				}
			}
		}
		group := workloadv1alpha1.ServingGroupName(ms.Name, idx)
		logger.V(2).Info("moving ServingGroup off drained nodes", "group", group, "nodes", from,
			"readyGroups", rep.decision.ReadyGroups, "minAvailable", minAvail)
		r.Recorder.Eventf(ms, groupObject(ms, idx), corev1.EventTypeNormal, ReasonDrainMove, actionRecreate,
			"moving ServingGroup %s whole off drained node %s (%d of min %d groups ready)", group, strings.Join(from, ", "),
			rep.decision.ReadyGroups, minAvail)
		if err := r.deleteGroup(ctx, ms, idx, ReasonDrainMove); err != nil {
			return nil, err
		}
		drainMoves.Inc()
		delete(groups, idx)
	}
	if len(rep.decision.Waiting) > 0 {
		logger.V(2).Info("drain waits", "waiting", len(rep.decision.Waiting), "readyGroups", rep.decision.ReadyGroups, "minAvailable", minAvail)
	}
	return rep, nil
}

// setDrainCondition writes ConditionDisruptionAllowed from the pass's drain report, records
// a drain that starts to wait (once per change of its message) and the waiting gauge. A
// nil report (the pass stopped before the drain step) leaves the condition as it is.
func (r *Reconciler) setDrainCondition(st *workloadv1alpha1.ModelServingStatus, ms *workloadv1alpha1.ModelServing, rep *drainReport) {
	if rep == nil {
		return
	}
	c := metav1.Condition{Type: ConditionDisruptionAllowed, ObservedGeneration: ms.Generation}
	waiting := len(rep.decision.Waiting)
	switch {
	case rep.err != nil:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonInvalidMinAvailable
		c.Message = rep.err.Error() + "; no ServingGroup moves for a node drain until it is fixed (evictions of its pods are refused)"
	case waiting > 0:
		whys := make([]string, waiting)
		for i, w := range rep.decision.Waiting {
			whys[i] = w.Why
		}
		c.Status, c.Reason = metav1.ConditionFalse, ReasonDrainWaiting
		c.Message = fmt.Sprintf("nodes drained: %s; %s", strings.Join(rep.nodes, ", "), strings.Join(whys, "; "))
	case len(rep.nodes) > 0:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonDrainMove
		c.Message = fmt.Sprintf("nodes drained: %s; moving ServingGroups one at a time (%d of min %d groups ready)",
			strings.Join(rep.nodes, ", "), rep.decision.ReadyGroups, rep.decision.Min)
	default:
		meta.RemoveStatusCondition(&st.Conditions, ConditionDisruptionAllowed)
		drainWaiting.DeleteLabelValues(ms.Namespace, ms.Name)
		return
	}
	drainWaiting.WithLabelValues(ms.Namespace, ms.Name).Set(float64(waiting))
	if old := meta.FindStatusCondition(ms.Status.Conditions, ConditionDisruptionAllowed); c.Status == metav1.ConditionFalse &&
		(old == nil || old.Message != c.Message) {
		typ := corev1.EventTypeNormal
		if c.Reason == ReasonInvalidMinAvailable {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(ms, nil, typ, c.Reason, actionRefuse, "%s", c.Message)
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
