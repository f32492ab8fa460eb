package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// NVIDIA ComputeDomains (k8s-dra-driver-gpu, resource.nvidia.com/v1beta1) give the pods of
// one workload cross-node NVLink (IMEX channels) on GB200/GB300 NVL72 racks. A ModelServing
// annotated ComputeDomainAnnotation: "true" gets one ComputeDomain per ServingGroup: a group
// is the unit that shares GPU memory across nodes, and NVIDIA's controller makes the
// domain's channel ResourceClaimTemplate, which every pod of the group then claims.
//
// The CRD is optional (most clusters do not run NVIDIA's DRA driver), so there are no Go
// types and no informer: the objects are unstructured and read straight from the apiserver
// (the manager's client does not cache unstructured reads), only for annotated
// ModelServings. That way a CRD installed after berth-controller started is used on the
// next reconcile, without a restart.
const (
	// ComputeDomainAnnotation on a ModelServing: "true" asks for a ComputeDomain per
	// ServingGroup; "false" or absent for none; any other value is refused.
	ComputeDomainAnnotation = "berth.sh/compute-domain"
	// ComputeDomainCRD is the CRD the annotation needs the apiserver to serve.
	ComputeDomainCRD = "computedomains.resource.nvidia.com"
	// ComputeDomainClaimName is the pod's resourceClaims entry (and every container's
	// resources.claims entry) that takes the group's channel.
	ComputeDomainClaimName = "compute-domain-channel"
	// computeDomainRetiredLabel marks the domain of a group that is being deleted or
	// recreated whole: it goes once the group's pods are gone, and the group's next pods
	// wait for a fresh domain (an IMEX domain is not reused across incarnations of a group).
	computeDomainRetiredLabel = "berth.sh/compute-domain-retired"
)

// Reasons of the ComputeDomain events and of the ComputeDomainsReady condition.
const (
	// ReasonCreateComputeDomain: a group's ComputeDomain is created, before its pods.
	ReasonCreateComputeDomain = "CreateComputeDomain"
	// ReasonDeleteComputeDomain: the domain of a deleted or recreated group is deleted, once its pods are gone.
	ReasonDeleteComputeDomain = "DeleteComputeDomain"
	// ReasonComputeDomainCRDMissing: the annotation asks for domains the apiserver does not serve.
	ReasonComputeDomainCRDMissing = "ComputeDomainCRDMissing"
	// ReasonInvalidComputeDomainAnnotation: the annotation's value is neither "true" nor "false".
	ReasonInvalidComputeDomainAnnotation = "InvalidComputeDomainAnnotation"
	// ReasonComputeDomainConflict: a ComputeDomain of the group's name belongs to something else.
	ReasonComputeDomainConflict = "ComputeDomainConflict"
)

// ModelServingComputeDomainsReady is the condition type: false while the annotation cannot
// be honoured (no pod is created meanwhile), true while every group has its domain.
const ModelServingComputeDomainsReady = "ComputeDomainsReady"

// computeDomainRetry is how soon a ModelServing waiting for the CRD, or for an old domain to
// go, is looked at again: nothing it watches tells it.
const (
	computeDomainRetry     = 10 * time.Second
	computeDomainGoneRetry = 2 * time.Second
)

var computeDomainGVK = schema.GroupVersionKind{Group: "resource.nvidia.com", Version: "v1beta1", Kind: "ComputeDomain"}

// computeDomainError is why the annotation cannot be honoured: the reason and message of
// the condition and of the Warning event.
type computeDomainError struct{ reason, msg string }

func (e *computeDomainError) Error() string { return e.msg }

// wantsComputeDomains reads the annotation.
func wantsComputeDomains(ms *workloadv1alpha1.ModelServing) (bool, error) {
	v, ok := ms.Annotations[ComputeDomainAnnotation]
	switch {
	case !ok || v == "false":
		return false, nil
	case v == "true":
		return true, nil
	}
	return false, &computeDomainError{reason: ReasonInvalidComputeDomainAnnotation,
		msg: fmt.Sprintf("metadata.annotations[%s] is %q, want \"true\" or \"false\"; no pod is created until it is fixed", ComputeDomainAnnotation, v)}
}

// ComputeDomainName is group i's ComputeDomain: the group's own name.
func ComputeDomainName(ms string, i int) string { return workloadv1alpha1.ServingGroupName(ms, i) }

// ComputeDomainChannelTemplate is the ResourceClaimTemplate NVIDIA's controller makes for
// group i's domain, which the group's pods claim.
func ComputeDomainChannelTemplate(ms string, i int) string {
	return ComputeDomainName(ms, i) + "-channel"
}

// BuildComputeDomain is group i's ComputeDomain, owned by the ModelServing (so the garbage
// collector removes it with the ModelServing) and labelled with it and the group.
//
// numNodes is 0, the API's documented default: with the driver's IMEXDaemonsWithDNSNames feature gate (on by
// default) IMEX daemons join as pods land and numNodes only feeds the domain's
// status; a group's pod count is not its node count (pods may share a node), and a numNodes
// above the real count would leave the domain NotReady for good.
func BuildComputeDomain(ms *workloadv1alpha1.ModelServing, i int) *unstructured.Unstructured {
	cd := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"numNodes": int64(0),
			"channel": map[string]any{
				"resourceClaimTemplate": map[string]any{"name": ComputeDomainChannelTemplate(ms.Name, i)},
				"allocationMode":        "Single",
			},
		},
	}}
	cd.SetGroupVersionKind(computeDomainGVK)
	cd.SetNamespace(ms.Namespace)
	cd.SetName(ComputeDomainName(ms.Name, i))
	cd.SetLabels(map[string]string{
		workloadv1alpha1.ModelServingNameLabel: ms.Name,
		workloadv1alpha1.GroupNameLabel:        workloadv1alpha1.ServingGroupName(ms.Name, i),
	})
	cd.SetOwnerReferences([]metav1.OwnerReference{ownerRef(ms)})
	return cd
}

// wireComputeDomain makes pod claim group i's channel: a pod resourceClaims entry from the
// domain's template, named by every container. Every container, not only those asking for
// GPUs: a claim is only a device node and an env var, and an engine's GPUs may come from a
// DRA claim rather than a resource limit, so no container that may do NVLink transfers is
// left out. Init containers are left alone: they run before the engine.
func wireComputeDomain(pod *corev1.Pod, ms string, i int) {
	tmpl := ComputeDomainChannelTemplate(ms, i)
	for _, c := range pod.Spec.ResourceClaims {
		if c.Name == ComputeDomainClaimName {
			return // the template named it already; leave the user's choice alone
		}
	}
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: ComputeDomainClaimName, ResourceClaimTemplateName: &tmpl})
	for k := range pod.Spec.Containers {
		res := &pod.Spec.Containers[k].Resources
		res.Claims = append(res.Claims, corev1.ResourceClaim{Name: ComputeDomainClaimName})
	}
}

// hasComputeDomainClaim says whether a pod was wired to a domain.
func hasComputeDomainClaim(p *corev1.Pod) bool {
	for _, c := range p.Spec.ResourceClaims {
		if c.Name == ComputeDomainClaimName {
			return true
		}
	}
	return false
}

// computeDomains is one pass's view for the groups' domains: whether the ModelServing asks
// for them, and how many pods (terminating ones included) each group still has.
type computeDomains struct {
	on   bool
	pods map[string]int // by group name
}

func newComputeDomains(on bool, owned []corev1.Pod) *computeDomains {
	d := &computeDomains{on: on, pods: map[string]int{}}
	for i := range owned {
		d.pods[owned[i].Labels[workloadv1alpha1.GroupNameLabel]]++
	}
	return d
}

// checkComputeDomainCRD returns a computeDomainError when the apiserver does not serve
// ComputeDomains. A List (one per pass, annotated ModelServings only) rather than the
// manager's start-time discovery: the mapper looks the group up again on a miss, so a CRD
// installed later is found without a restart.
func (r *Reconciler) checkComputeDomainCRD(ctx context.Context, ms *workloadv1alpha1.ModelServing) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(computeDomainGVK.GroupVersion().WithKind("ComputeDomainList"))
	err := r.List(ctx, list, client.InNamespace(ms.Namespace), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms.Name}, client.Limit(1))
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return &computeDomainError{reason: ReasonComputeDomainCRDMissing,
			msg: fmt.Sprintf("metadata.annotations[%s] asks for a ComputeDomain per ServingGroup, but the apiserver does not serve %s (install NVIDIA's k8s-dra-driver-gpu); no pod is created until it does",
				ComputeDomainAnnotation, ComputeDomainCRD)}
	}
	return err
}

// refuseComputeDomains records, once per change of the problem, a Warning event saying why
// no pod is created; the ComputeDomainsReady condition says it too.
func (r *Reconciler) refuseComputeDomains(ctx context.Context, ms *workloadv1alpha1.ModelServing, err error) {
	reason, msg := computeDomainRefused(err)
	log.FromContext(ctx).V(2).Info("ComputeDomains refused: no pod is created", "reason", reason, "why", msg)
	if c := meta.FindStatusCondition(ms.Status.Conditions, ModelServingComputeDomainsReady); c != nil &&
		c.Status == metav1.ConditionFalse && c.Message == msg && c.ObservedGeneration == ms.Generation {
		return // said already
	}
	r.Recorder.Eventf(ms, nil, corev1.EventTypeWarning, reason, actionRefuse, "%s", msg)
}

func computeDomainRefused(err error) (reason, msg string) {
	var ce *computeDomainError
	if errors.As(err, &ce) {
		return ce.reason, ce.msg
	}
	return ReasonComputeDomainCRDMissing, err.Error()
}

// setComputeDomainsCondition says whether the annotation is honoured; a ModelServing
// without it (and without an error) has no such condition.
func setComputeDomainsCondition(st *workloadv1alpha1.ModelServingStatus, ms *workloadv1alpha1.ModelServing, cdErr error) {
	on, _ := wantsComputeDomains(ms)
	if !on && cdErr == nil {
		meta.RemoveStatusCondition(&st.Conditions, ModelServingComputeDomainsReady)
		return
	}
	c := metav1.Condition{Type: ModelServingComputeDomainsReady, ObservedGeneration: ms.Generation,
		Status: metav1.ConditionTrue, Reason: "Created", Message: "each ServingGroup's pods claim the channel of the group's own ComputeDomain"}
	if cdErr != nil {
		c.Status = metav1.ConditionFalse
		c.Reason, c.Message = computeDomainRefused(cdErr)
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

func computeDomainRef(ns, name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: computeDomainGVK.GroupVersion().String(), Kind: computeDomainGVK.Kind, Namespace: ns, Name: name}
}

// ensureComputeDomain makes sure group i has a live domain of its own before its pods are
// created. It returns how long to wait (no pod is created meanwhile) while an old domain of
// the group still has to go: a retired one once the group's old pods are gone, a deleted one
// until NVIDIA's controller has taken its finalizer off.
func (r *Reconciler) ensureComputeDomain(ctx context.Context, ms *workloadv1alpha1.ModelServing, i int, d *computeDomains) (time.Duration, error) {
	logger := log.FromContext(ctx)
	name := ComputeDomainName(ms.Name, i)
	have := &unstructured.Unstructured{}
	have.SetGroupVersionKind(computeDomainGVK)
	err := r.Get(ctx, types.NamespacedName{Namespace: ms.Namespace, Name: name}, have)
	if apierrors.IsNotFound(err) {
		want := BuildComputeDomain(ms, i)
		if err := r.Create(ctx, want); apierrors.IsAlreadyExists(err) {
			return computeDomainGoneRetry, nil
		} else if err != nil {
			return 0, fmt.Errorf("create ComputeDomain %s: %w", name, err)
		}
		computeDomainOps.WithLabelValues("create").Inc()
		logger.V(2).Info("created ComputeDomain", "computeDomain", klog.KObj(want), "group", workloadv1alpha1.ServingGroupName(ms.Name, i))
		r.Recorder.Eventf(ms, computeDomainRef(ms.Namespace, name), corev1.EventTypeNormal, ReasonCreateComputeDomain, actionCreate,
			"created ComputeDomain %s for ServingGroup %s; its pods claim ResourceClaimTemplate %s", name, workloadv1alpha1.ServingGroupName(ms.Name, i), ComputeDomainChannelTemplate(ms.Name, i))
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if have.GetDeletionTimestamp() != nil {
		logger.V(4).Info("waiting for the group's old ComputeDomain to go", "computeDomain", klog.KObj(have))
		return computeDomainGoneRetry, nil
	}
	if !metav1.IsControlledBy(have, ms) {
		if have.GetLabels()[workloadv1alpha1.ModelServingNameLabel] != ms.Name {
			msg := fmt.Sprintf("ComputeDomain %s is in the way of ServingGroup %s and is not this ModelServing's; its pods wait until it is removed", name, workloadv1alpha1.ServingGroupName(ms.Name, i))
			r.Recorder.Eventf(ms, computeDomainRef(ms.Namespace, name), corev1.EventTypeWarning, ReasonComputeDomainConflict, actionRefuse, "%s", msg)
			return computeDomainRetry, nil
		}
		// Left by a deleted ModelServing of this name: its pods are gone or going.
		return computeDomainGoneRetry, r.deleteComputeDomain(ctx, ms, have, "it was left by an earlier ModelServing of this name")
	}
	if have.GetLabels()[computeDomainRetiredLabel] == "true" {
		if d.pods[workloadv1alpha1.ServingGroupName(ms.Name, i)] == 0 {
			return computeDomainGoneRetry, r.deleteComputeDomain(ctx, ms, have, "the group it served was recreated and its pods are gone")
		}
		return computeDomainGoneRetry, nil
	}
	return 0, nil
}

// retireComputeDomain marks group i's domain to go once the group's pods (being deleted
// now) are gone. Deleting it at once would pull the IMEX channel from under pods still
// shutting down.
func (r *Reconciler) retireComputeDomain(ctx context.Context, ms *workloadv1alpha1.ModelServing, i int) error {
	cd := &unstructured.Unstructured{}
	cd.SetGroupVersionKind(computeDomainGVK)
	cd.SetNamespace(ms.Namespace)
	cd.SetName(ComputeDomainName(ms.Name, i))
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, computeDomainRetiredLabel))
	err := r.Patch(ctx, cd, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	return err
}

// pruneComputeDomains deletes the domains of groups that are no longer kept, once no pod of
// the group is left (a pod's deletion requeues the ModelServing).
func (r *Reconciler) pruneComputeDomains(ctx context.Context, ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup, d *computeDomains) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(computeDomainGVK.GroupVersion().WithKind("ComputeDomainList"))
	err := r.List(ctx, list, client.InNamespace(ms.Namespace), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms.Name})
	if meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for k := range list.Items {
		cd := &list.Items[k]
		if !metav1.IsControlledBy(cd, ms) || cd.GetDeletionTimestamp() != nil {
			continue
		}
		group := cd.GetLabels()[workloadv1alpha1.GroupNameLabel]
		if idx, ok := GroupIndex(ms.Name, group); ok && groups[idx] != nil {
			continue // kept: ensureComputeDomain looks after it
		}
		if d.pods[group] > 0 {
			continue
		}
		if err := r.deleteComputeDomain(ctx, ms, cd, "its ServingGroup was deleted and its pods are gone"); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) deleteComputeDomain(ctx context.Context, ms *workloadv1alpha1.ModelServing, cd *unstructured.Unstructured, why string) error {
	uid := cd.GetUID()
	if err := r.Delete(ctx, cd, client.Preconditions{UID: &uid}); err != nil {
		return client.IgnoreNotFound(err)
	}
	computeDomainOps.WithLabelValues("delete").Inc()
	log.FromContext(ctx).V(2).Info("deleted ComputeDomain", "computeDomain", klog.KObj(cd), "why", why)
	r.Recorder.Eventf(ms, computeDomainRef(cd.GetNamespace(), cd.GetName()), corev1.EventTypeNormal, ReasonDeleteComputeDomain, actionDelete,
		"deleted ComputeDomain %s: %s", cd.GetName(), why)
	return nil
}

// missingPods says whether this pass would create pods for the group: a role replica that
// is not terminating lacks one.
func missingPods(g *servingGroup, units []*unit) bool {
	for _, u := range units {
		if u.terminating() {
			continue
		}
		for _, n := range u.names {
			if _, ok := g.pods[n]; !ok {
				return true
			}
		}
	}
	return false
}

// anyComputeDomainClaim says whether a pod claims a domain's channel: its domain has to go
// with its group even after the annotation was removed.
func anyComputeDomainClaim(pods []corev1.Pod) bool {
	for i := range pods {
		if hasComputeDomainClaim(&pods[i]) {
			return true
		}
	}
	return false
}
