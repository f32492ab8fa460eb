package topology

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/berth-sh/berth/pkg/plugins/placement"
)

func nodeInfo(name string) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return ni
}

// kube-scheduler tries a pod's nominated node through Filter alone, whatever PreFilter
// returned: Filter must keep the pod inside its replica's leaf by itself.
func TestFilterKeepsThePodInItsTargetWhatPreFilterReturned(t *testing.T) {
	state := framework.NewCycleState()
	leaf := placement.NewTarget("l01", 1, []string{"n-010", "n-011"})
	state.Write(stateKey, &cycleState{target: leaf, key: "ns/g"})
	pl := &Topology{}
	assert.True(t, pl.Filter(context.Background(), state, &corev1.Pod{}, nodeInfo("n-011")).IsSuccess())
	st := pl.Filter(context.Background(), state, &corev1.Pod{}, nodeInfo("n-100"))
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Equal(t, "node is outside l01, where the pod's group places it", st.Message())
}
