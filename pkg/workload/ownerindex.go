package workload

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// controllerUIDIndex indexes the pods, Services, PodGroups and ControllerRevisions in the
// controller's cache by the UID of the object that controls them, so a pass lists only its
// own ModelServing's: with a thousand ModelServings in one namespace, listing the namespace
// (or filtering it by label, which the cache does by scanning) on every pass is quadratic
// work. Listing pods by label was a fifth of berth-controller's CPU with only 100
// ModelServings (bench/scalebench).
const controllerUIDIndex = "berth.controllerUID"

// controllerUID is the index function: the controlling owner's UID, if any.
func controllerUID(obj client.Object) []string {
	if ref := metav1.GetControllerOf(obj); ref != nil {
		return []string{string(ref.UID)}
	}
	return nil
}

// indexOwned registers controllerUIDIndex for the kinds a pass prunes.
func indexOwned(ctx context.Context, mgr ctrl.Manager) error {
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Service{}, &volcanov1beta1.PodGroup{}, &appsv1.ControllerRevision{}} {
		if err := mgr.GetFieldIndexer().IndexField(ctx, obj, controllerUIDIndex, controllerUID); err != nil {
			return err
		}
	}
	return nil
}
