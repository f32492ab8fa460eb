package accelerator

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

func TestQueueingHints(t *testing.T) {
	pl := newPlugin(t, nil)
	logger := klog.Background()
	events, err := pl.EventsToRegister(context.Background())
	require.NoError(t, err)
	require.Len(t, events, 3)

	pending := gpuPod("p", 8, map[string]string{ProductsAnnotation: h100})
	h100Node := gpuNode("n", 8, 0, h100, 81559, "hopper").Node()
	a100Node := gpuNode("n", 8, 0, a100, 81920, "ampere").Node()
	smallH100 := gpuNode("n", 4, 0, h100, 81559, "hopper").Node()

	hint := func(oldObj, newObj any) fwk.QueueingHint {
		h, err := pl.isSchedulableAfterNodeChange(logger, pending, oldObj, newObj)
		require.NoError(t, err)
		return h
	}
	assert.Equal(t, fwk.Queue, hint(nil, h100Node), "a matching node joined")
	assert.Equal(t, fwk.QueueSkip, hint(nil, a100Node), "wrong product")
	assert.Equal(t, fwk.QueueSkip, hint(nil, smallH100), "too few devices in all")
	assert.Equal(t, fwk.Queue, hint(a100Node, h100Node), "relabelled to a matching product")
	assert.Equal(t, fwk.Queue, hint(smallH100, h100Node), "devices added")
	relabelled := h100Node.DeepCopy()
	relabelled.Labels["unrelated"] = "x"
	assert.Equal(t, fwk.QueueSkip, hint(h100Node, relabelled), "nothing the pod needs changed")

	deleted := gpuPod("gone", 2, nil)
	deleted.Spec.NodeName = "n"
	h, err := pl.isSchedulableAfterPodDelete(logger, pending, deleted, nil)
	require.NoError(t, err)
	assert.Equal(t, fwk.Queue, h, "GPUs were freed")
	cpuPod := gpuPod("cpu", 0, nil)
	cpuPod.Spec.NodeName = "n"
	// The scheduler queues the pod whenever a hint returns an error, whatever hint came
	// with it: a QueueSkip is only a QueueSkip if the error is nil.
	h, err = pl.isSchedulableAfterPodDelete(logger, pending, cpuPod, nil)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, h)
	amdPod := devicePod("amd", "amd.com/gpu", 1, nil)
	amdPod.Spec.NodeName = "n"
	h, err = pl.isSchedulableAfterPodDelete(logger, pending, amdPod, nil)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, h, "another vendor's devices")

	fixed := pending.DeepCopy()
	fixed.Annotations[ProductsAnnotation] = a100 + "," + h100
	h, err = isSchedulableAfterOwnUpdate(logger, pending, pending, fixed)
	require.NoError(t, err)
	assert.Equal(t, fwk.Queue, h)
	labelled := pending.DeepCopy()
	labelled.Labels = map[string]string{"x": "y"}
	h, err = isSchedulableAfterOwnUpdate(logger, pending, pending, labelled)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, h)

	// An object of the wrong type is an error (and Queue, so the pod is not stranded): the
	// checks above would not notice hints that never report errors at all.
	h, err = pl.isSchedulableAfterNodeChange(logger, pending, nil, deleted)
	require.Error(t, err)
	assert.Equal(t, fwk.Queue, h)
	h, err = pl.isSchedulableAfterPodDelete(logger, pending, h100Node, nil)
	require.Error(t, err)
	assert.Equal(t, fwk.Queue, h)
	h, err = isSchedulableAfterOwnUpdate(logger, pending, pending, h100Node)
	require.Error(t, err)
	assert.Equal(t, fwk.Queue, h)
}

func TestSignPodSeparatesWhatFilterAndScoreRead(t *testing.T) {
	pl := newPlugin(t, nil)
	ctx := context.Background()
	sign := func(p *corev1.Pod) []fwk.SignFragment {
		f, s := pl.SignPod(ctx, p)
		require.True(t, s.IsSuccess())
		return f
	}
	a := gpuPod("a", 2, map[string]string{ProductsAnnotation: h100})
	b := gpuPod("b", 2, map[string]string{ProductsAnnotation: h100})
	assert.Equal(t, sign(a), sign(b))
	b.Spec.Containers[0].Resources.Requests[gpu] = resource.MustParse("4")
	assert.NotEqual(t, sign(a), sign(b))
	c := gpuPod("c", 2, map[string]string{ProductsAnnotation: a100})
	assert.NotEqual(t, sign(a), sign(c))
}
