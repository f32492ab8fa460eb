package accelerator

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

// profileYAML is the profile fragment docs/accelerator.md gives for berth-scheduler, with
// every default plugin but queue sort and bind disabled so that the framework runs this
// plugin alone.
const profileYAML = `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: berth-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: BerthAccelerator
        weight: 10
      disabled:
      - name: "*"
    queueSort:
      enabled:
      - name: PrioritySort
    bind:
      enabled:
      - name: DefaultBinder
  pluginConfig:
  - name: BerthAccelerator
    args:
      classCosts:
        NVIDIA-A100-SXM4-80GB: 1.0
        NVIDIA-H100-80GB-HBM3: 2.2
      preferNodesWithoutAccelerators: true
`

// The documented configuration loads through kube-scheduler's own decoding and puts the
// plugin at every extension point it implements.
func TestProfileConfiguresThePlugin(t *testing.T) {
	obj, _, err := scheme.Codecs.UniversalDecoder().Decode([]byte(profileYAML), nil, nil)
	require.NoError(t, err)
	cfg := obj.(*config.KubeSchedulerConfiguration)
	require.Len(t, cfg.Profiles, 1)

	// One cycle through the framework: a 1-GPU pod scores the cheap, packed node highest.
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for _, ni := range []*framework.NodeInfo{
		gpuNode("h100", 8, 7, h100, 81559, "hopper"),
		gpuNode("a100-empty", 8, 0, a100, 81920, "ampere"),
		gpuNode("a100-half", 8, 4, a100, 81920, "ampere"),
		gpuNode("a100-full", 8, 8, a100, 81920, "ampere"),
	} {
		nodes = append(nodes, ni.Node())
		for _, p := range ni.GetPods() {
			pods = append(pods, p.GetPod())
		}
	}
	snapshot := cache.NewSnapshot(pods, nodes)

	ctx := context.Background()
	metrics.Register() // the framework instruments plugins with the scheduler's metrics
	f, err := frameworkruntime.NewFramework(ctx, frameworkruntime.Registry{Name: New, queuesort.Name: queuesort.New, defaultbinder.Name: defaultbinder.New},
		&cfg.Profiles[0], frameworkruntime.WithSnapshotSharedLister(snapshot))
	require.NoError(t, err)
	plugins := f.ListPlugins()
	for point, set := range map[string]*config.PluginSet{
		"preFilter": &plugins.PreFilter, "filter": &plugins.Filter, "preScore": &plugins.PreScore, "score": &plugins.Score,
	} {
		require.Len(t, set.Enabled, 1, point)
		assert.Equal(t, Name, set.Enabled[0].Name, point)
	}
	assert.Equal(t, int32(10), plugins.Score.Enabled[0].Weight)

	pod := gpuPod("p", 1, nil)
	state := framework.NewCycleState()
	infos, err := snapshot.NodeInfos().List()
	require.NoError(t, err)
	_, status, _ := f.RunPreFilterPlugins(ctx, state, pod)
	require.True(t, status.IsSuccess(), status.Message())
	var feasible []fwk.NodeInfo
	for _, n := range infos {
		if s := f.RunFilterPlugins(ctx, state, pod, n); s.IsSuccess() {
			feasible = append(feasible, n)
		} else {
			assert.Equal(t, "a100-full", n.Node().Name)
			assert.Equal(t, []string{"node has 0 free nvidia.com/gpu, pod needs 1"}, s.Reasons())
		}
	}
	require.True(t, f.RunPreScorePlugins(ctx, state, pod, feasible).IsSuccess())
	scores, status := f.RunScorePlugins(ctx, state, pod, feasible)
	require.True(t, status.IsSuccess(), status.Message())
	total := map[string]int64{}
	for _, s := range scores {
		total[s.Name] = s.TotalScore
	}
	assert.Equal(t, map[string]int64{"a100-half": 1000, "a100-empty": 510, "h100": 500}, total)
}
