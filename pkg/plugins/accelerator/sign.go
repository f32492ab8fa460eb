package accelerator

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// Signature fragment keys (see fwk.SignFragment): what Filter and Score read of a pod.
const (
	annotationsSignerName = "v1.Pod.Metadata.Annotations[accelerator.berth.sh/*]"
	deviceSignerName      = "v1.Pod.Spec.AcceleratorDeviceRequest()"
)

// SignPod lets the scheduler batch pods that are identical to this plugin: two pods with
// the same accelerator request and annotations get the same filter result and raw scores
// on the same nodes. A plugin that does not sign turns batching off for the whole profile.
func (pl *Accelerator) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	res, count := pl.acc.deviceRequest(pod)
	var name corev1.ResourceName
	if res != nil {
		name = res.Name
	}
	return []fwk.SignFragment{
		{Key: deviceSignerName, Value: struct {
			Resource corev1.ResourceName
			Count    int64
		}{name, count}},
		{Key: annotationsSignerName, Value: [3]string{
			pod.Annotations[ProductsAnnotation], pod.Annotations[FamiliesAnnotation], pod.Annotations[MinMemoryAnnotation],
		}},
	}, nil
}
