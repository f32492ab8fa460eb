package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// berth-scheduler's count of the groups that fit (docs/autoscaling.md, "Placement-aware
// scale-up") allocates a group's DRA claims as the DynamicResources plugin would: a
// ModelServing whose engine claims two of dra-a100's four DRA GPUs, and asks for no
// resource a node counts, fits one more group beside its first and none beside two. A count
// of resources alone would find room for eight (its cap) on that node's CPUs.
func TestGroupsThatFitCountsDRADevices(t *testing.T) {
	w := newWorld(t)
	createDRANodes(t, w.ctx)
	waitForSlices(w)
	w.claimTemplate("two-gpus", 2, "")
	spec := podSpec(0)
	spec.Tolerations = []corev1.Toleration{{Key: draTaint, Operator: corev1.TolerationOpExists}}
	spec.NodeSelector = map[string]string{corev1.LabelHostname: draA100}
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("two-gpus")}}
	spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	ms := &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "dra"}}
	ms.Spec.SchedulerName = workloadv1alpha1.BerthSchedulerName
	ms.Spec.Replicas = ptr.To[int32](1)
	ms.Spec.Template.Roles = []workloadv1alpha1.Role{{Name: "server", Replicas: ptr.To[int32](1), EntryTemplate: workloadv1alpha1.PodTemplateSpec{Spec: spec}}}
	require.NoError(t, cl.Create(w.ctx, ms))

	count := func() (string, string) {
		var got workloadv1alpha1.ModelServing
		if cl.Get(w.ctx, client.ObjectKeyFromObject(ms), &got) != nil {
			return "", ""
		}
		return got.Annotations[workloadv1alpha1.GroupsThatFitAnnotation], got.Annotations[workloadv1alpha1.GroupsThatFitReplicasAnnotation]
	}
	running := func(n int) func() bool {
		return func() bool {
			pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
			if err != nil {
				return false
			}
			up := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					up++
				}
			}
			return up == n
		}
	}
	w.eventually("the first group running", time.Minute, running(1))
	var fits, replicas string
	w.eventually("one more group fits the two DRA GPUs left", 30*time.Second, func() bool {
		fits, replicas = count()
		return fits == "1" && replicas == "1"
	})

	require.NoError(t, cl.Patch(w.ctx, ms, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":2}}`))))
	w.eventually("the second group running", time.Minute, running(2))
	w.eventually("no more group fits", 30*time.Second, func() bool {
		fits, replicas = count()
		return fits == "0" && replicas == "2"
	})
}
