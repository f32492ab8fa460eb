package gang

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/plugins/placement"
)

func TestArgsDefaultsAndValidation(t *testing.T) {
	args, err := decodeArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, int64(60), *args.PermitWaitingTimeSeconds)
	_, err = decodeArgs(&Args{PermitWaitingTimeSeconds: ptr.To[int64](0)})
	assert.ErrorContains(t, err, "permitWaitingTimeSeconds: Invalid value: 0: must be positive")

	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{WaitTimeoutAnnotation: "5s"}}}
	assert.Equal(t, "5s", args.waitTimeout(pg).String())
	assert.Equal(t, 10*time.Second, args.reserveAfter())
	args, err = decodeArgs(&Args{ReserveAfterSeconds: ptr.To[int64](-1)})
	require.NoError(t, err, "negative turns keeping capacity off")
	assert.Negative(t, args.reserveAfter())
}

func TestMinResourcesPreCheck(t *testing.T) {
	want := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("24")}
	assert.Equal(t, "the group's minResources ask for 24 nvidia.com/gpu, 16 free in the cluster", checkMinResources(want, gpuNodes(8, 8)))
	assert.Empty(t, checkMinResources(want, gpuNodes(8, 8, 8)))
	assert.Empty(t, checkMinResources(nil, gpuNodes()))
}

func gpuNodes(free ...int64) *placement.Pool {
	var nodes []placement.StaticNode
	for i, f := range free {
		nodes = append(nodes, placement.StaticNode{
			Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)}},
			Free: placement.Resources{"nvidia.com/gpu": f, corev1.ResourcePods: 110},
		})
	}
	return placement.NewPool(placement.StaticSource(nodes...), nil, nil)
}

// kube-scheduler tries a pod's nominated node through Filter alone, before PreFilter's
// node list: a pod sent down the fast path must go to its planned node, not to a node an
// earlier attempt left nominated.
func TestFilterSendsAPlannedPodOnlyToItsPlannedNode(t *testing.T) {
	state := framework.NewCycleState()
	state.Write(preFilterStateKey, &preFilterState{key: "ns/g", planned: "n1"})
	ni := framework.NewNodeInfo()
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n0"}})
	st := (&Gang{}).Filter(context.Background(), state, &corev1.Pod{}, ni)
	assert.Equal(t, fwk.Unschedulable, st.Code())
	assert.Equal(t, "the group's plan puts the pod on node n1", st.Message())
}
