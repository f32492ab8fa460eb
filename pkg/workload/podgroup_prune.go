package workload

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// prunePodGroups deletes the ModelServing's PodGroups that no kept group needs. deleteGroup
// removes a group's pods, then its Services, then its PodGroup; a controller killed between
// the first and the last leaves a PodGroup whose group no longer exists (it has no pods, so
// no later pass sees the group to delete it again), and a PodGroup created just before a
// kill may belong to a group a scale-down has since dropped. Deriving the set from the kept
// groups removes both. The chaos test found the first (a PodGroup with no pods once settled).
func (r *Reconciler) prunePodGroups(ctx context.Context, ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup) error {
	want := map[string]bool{}
	if needsPodGroup(ms) {
		for idx := range groups {
			want[workloadv1alpha1.ServingGroupName(ms.Name, idx)] = true
		}
	}
	var list volcanov1beta1.PodGroupList
	if err := r.List(ctx, &list, client.InNamespace(ms.Namespace), client.MatchingFields{controllerUIDIndex: string(ms.UID)}); err != nil {
		return err
	}
	for i := range list.Items {
		pg := &list.Items[i]
		if want[pg.Name] || pg.DeletionTimestamp != nil || !metav1.IsControlledBy(pg, ms) {
			continue
		}
		if _, ours := GroupIndex(ms.Name, pg.Name); !ours {
			// Not named as one of our groups: Volcano's podgroup controller names the PodGroup
			// it makes for a volcano pod without one "podgroup-<owner UID>" and gives it the
			// pod's owner references, so it is controlled by this ModelServing too. Its pods
			// name it in their scheduling.k8s.io/group-name annotation and Volcano never
			// makes it again: deleting it would leave them unschedulable.
			continue
		}
		err := r.Delete(ctx, pg, client.Preconditions{UID: &pg.UID})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		log.FromContext(ctx).V(2).Info("deleted PodGroup no kept ServingGroup needs", "podGroup", klog.KObj(pg))
		r.Recorder.Eventf(ms, pg, corev1.EventTypeNormal, ReasonDeletePodGroup, actionDelete, "deleted PodGroup %s: ServingGroup %s is gone or needs no gang", pg.Name, pg.Name)
	}
	return nil
}
