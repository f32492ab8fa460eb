package workload

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// wantedServices names the headless Services the kept groups need: one per role replica
// with workers in the spec, plus any a live pod of theirs still has as its subdomain. The
// second keeps the Service of an entry pod left on an old revision (below the partition, or
// not yet replaced by the rollout) whose role has no workers in the new template: the pod's
// own DNS name resolves through that Service until the pod goes.
func wantedServices(ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup) map[string]bool {
	want := map[string]bool{}
	for _, g := range groups {
		for ri := range ms.Spec.Template.Roles {
			r := &ms.Spec.Template.Roles[ri]
			if r.WorkerReplicas == 0 {
				continue
			}
			for j := 0; j < roleReplicas(r); j++ {
				want[ServiceName(ms.Name, g.index, r.Name, j)] = true
			}
		}
		for _, p := range g.pods {
			if p.DeletionTimestamp == nil && p.Spec.Subdomain != "" {
				want[p.Spec.Subdomain] = true
			}
		}
	}
	return want
}

// pruneServices deletes the ModelServing's headless Services that no kept role replica
// needs: its role was scaled down, lost its workers or left the template. A group that goes
// takes its Services in deleteGroup; deriving the set here, rather than deleting on each of
// those transitions, also removes any Service a failed or interrupted pass left behind.
func (r *Reconciler) pruneServices(ctx context.Context, ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup) error {
	var list corev1.ServiceList
	if err := r.List(ctx, &list, client.InNamespace(ms.Namespace), client.MatchingFields{controllerUIDIndex: string(ms.UID)}); err != nil {
		return err
	}
	want := wantedServices(ms, groups)
	for i := range list.Items {
		svc := &list.Items[i]
		if want[svc.Name] || svc.DeletionTimestamp != nil || !metav1.IsControlledBy(svc, ms) {
			continue
		}
		err := r.Delete(ctx, svc, client.Preconditions{UID: &svc.UID})
		if apierrors.IsNotFound(err) {
			continue // deleted already (by deleteGroup, or an earlier pass the cache has not caught up with)
		}
		if err != nil {
			return err
		}
		log.FromContext(ctx).V(2).Info("deleted headless Service no kept role replica needs", "service", klog.KObj(svc))
		r.Recorder.Eventf(ms, svc, corev1.EventTypeNormal, ReasonDeleteService, actionDelete,
			"deleted headless Service %s: role replica %s of %s is no longer in the spec or has no workers",
			svc.Name, svc.Labels[workloadv1alpha1.RoleIDLabel], svc.Labels[workloadv1alpha1.GroupNameLabel])
	}
	return nil
}
