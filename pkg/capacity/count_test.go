package capacity

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

// servingOn is a ModelServing of one role with `workers` workers per replica, each pod
// asking for gpus GPUs of the given product (node selector), at `replicas` groups.
func servingOn(name, product string, gpus int64, workers int32, replicas int32) *workloadv1alpha1.ModelServing {
	spec := workloadv1alpha1.PodTemplateSpec{Spec: corev1.PodSpec{
		NodeSelector: map[string]string{sim.GPUProductLabel: product},
		Containers: []corev1.Container{{Name: "engine", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ // limits only, as templates say it
			sim.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI),
		}}}},
	}}
	role := workloadv1alpha1.Role{Name: "server", Replicas: ptr.To[int32](1), EntryTemplate: spec, WorkerReplicas: workers}
	if workers > 0 {
		role.WorkerTemplate = spec.DeepCopy()
	}
	ms := &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	ms.Spec.Replicas = ptr.To(replicas)
	ms.Spec.SchedulerName = workloadv1alpha1.BerthSchedulerName
	ms.Spec.Template.Roles = []workloadv1alpha1.Role{role}
	return ms
}

func gpuPod(name, node string, gpus int64) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: node,
		Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			sim.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}}}
}

func node(name, product string) *corev1.Node {
	return sim.NewNode(name, sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8, GPUProduct: product}, nil)
}

func TestFitsCountsWholeGroupsPerPool(t *testing.T) {
	nodes := []*corev1.Node{node("a100-0", "A100"), node("a100-1", "A100"), node("h100-0", "H100")}
	// One A100 node is half used; a pending pod of 4 GPUs will take the other half.
	pods := []*corev1.Pod{gpuPod("running", "a100-0", 4), gpuPod("pending", "", 4)}
	c := NewCounter(Cluster{Nodes: nodes, Pods: pods})

	// 4-GPU groups of one pod: a100-1 holds 2, a100-0 none (4 running + 4 pending).
	assert.Equal(t, 2, c.Fits(servingOn("small", "A100", 4, 0, 0), DefaultLimit), "at zero replicas too")
	// 8-GPU groups of two pods (entry + 1 worker, 4 GPUs each): a whole group needs both.
	assert.Equal(t, 1, c.Fits(servingOn("pair", "A100", 4, 1, 3), DefaultLimit))
	// Groups larger than any node's free GPUs never fit: none is made into pending pods.
	assert.Equal(t, 0, c.Fits(servingOn("big", "A100", 16, 0, 1), DefaultLimit))
	// The H100 pool is empty: 8 one-GPU groups, capped.
	assert.Equal(t, 8, c.Fits(servingOn("h", "H100", 1, 0, 1), DefaultLimit))
	assert.Equal(t, 3, c.Fits(servingOn("h", "H100", 1, 0, 1), 3))
	// A product no node has: nothing fits.
	assert.Equal(t, 0, c.Fits(servingOn("b200", "B200", 1, 0, 1), DefaultLimit))
	// Counting does not use the capacity for the next ModelServing.
	assert.Equal(t, 2, c.Fits(servingOn("small", "A100", 4, 0, 0), DefaultLimit))
}

func TestFitsHonoursTaintsAndCordons(t *testing.T) {
	tainted := node("a100-0", "A100")
	tainted.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "other", Effect: corev1.TaintEffectNoSchedule}}
	cordoned := node("a100-1", "A100")
	cordoned.Spec.Unschedulable = true
	c := NewCounter(Cluster{Nodes: []*corev1.Node{tainted, cordoned}})
	ms := servingOn("small", "A100", 8, 0, 1)
	assert.Equal(t, 0, c.Fits(ms, DefaultLimit))
	ms.Spec.Template.Roles[0].EntryTemplate.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "other", Effect: corev1.TaintEffectNoSchedule}}
	assert.Equal(t, 1, NewCounter(Cluster{Nodes: []*corev1.Node{tainted, cordoned}}).Fits(ms, DefaultLimit))
}

// pdOn is a prefill/decode ModelServing of one group, each role one replica of one pod
// asking gpus GPUs of product.
func pdOn(name, product string, gpus int64) *workloadv1alpha1.ModelServing {
	ms := servingOn(name, product, gpus, 0, 1)
	decode := ms.Spec.Template.Roles[0]
	decode.Name = "decode"
	prefill := *decode.DeepCopy()
	prefill.Name = "prefill"
	ms.Spec.Template.Roles = []workloadv1alpha1.Role{decode, prefill}
	return ms
}

// placedGroup is group 0 of ms, its pods bound to node as the controller builds them.
func placedGroup(ms *workloadv1alpha1.ModelServing, node string) []*corev1.Pod {
	var out []*corev1.Pod
	for ri := range ms.Spec.Template.Roles {
		for _, p := range rolePods(ms, 0, &ms.Spec.Template.Roles[ri], 0) {
			p.Spec.NodeName = node
			out = append(out, p)
		}
	}
	return out
}

// A disaggregated role's scale-up adds a replica to every group: the count is per role,
// and the pairs that fit together are counted too, since the two roles share the node.
func TestRoleFitsAndWhatFitsAlongside(t *testing.T) {
	ms := pdOn("pd", "A100", 2)
	// Group 0 takes 4 of the node's 8 GPUs; a second node of another product has room the
	// roles may not use.
	c := NewCounter(Cluster{Nodes: []*corev1.Node{node("a100-0", "A100"), node("h100-0", "H100")}, Pods: placedGroup(ms, "a100-0")})
	assert.Equal(t, 2, c.RoleFits(ms, 0, DefaultLimit), "two more 2-GPU decode replicas fit in the 4 GPUs left")
	assert.Equal(t, 2, c.RoleFits(ms, 1, DefaultLimit))
	assert.Equal(t, []int{2, 1, 0}, c.Alongside(ms, 0, 1, DefaultLimit), "with k more decode replicas, 2-k more prefill ones fit")
	assert.Equal(t, 1, c.RoleFits(ms, 0, 1), "capped")
	// The spec already asks for a second decode replica whose pod does not exist yet: the
	// count is made against 2 and that replica's GPUs are taken.
	ms.Spec.Template.Roles[0].Replicas = ptr.To[int32](2)
	assert.Equal(t, 1, c.RoleFits(ms, 0, DefaultLimit))
	assert.Equal(t, []int{1, 0}, c.Alongside(ms, 0, 1, DefaultLimit))
	ms.Spec.Template.Roles[0].Replicas = ptr.To[int32](1)

	// Two groups: each step adds a replica to both (4 GPUs), so the 6 free GPUs of two
	// nodes hold one step of one role.
	ms.Spec.Replicas = ptr.To[int32](2)
	pods := placedGroup(ms, "a100-0")
	for _, p := range rolePods(ms, 1, &ms.Spec.Template.Roles[0], 0) {
		p.Spec.NodeName = "a100-1"
		pods = append(pods, p)
	}
	for _, p := range rolePods(ms, 1, &ms.Spec.Template.Roles[1], 0) {
		p.Spec.NodeName = "a100-1"
		pods = append(pods, p)
	}
	pods = append(pods, gpuPod("other", "a100-1", 2))
	c = NewCounter(Cluster{Nodes: []*corev1.Node{node("a100-0", "A100"), node("a100-1", "A100")}, Pods: pods})
	assert.Equal(t, 1, c.RoleFits(ms, 0, DefaultLimit), "one step of two replicas, not two")
	assert.Equal(t, []int{1, 0}, c.Alongside(ms, 0, 1, DefaultLimit))
	// A ModelServing with no placed group has nothing to add a role replica to.
	assert.Equal(t, 0, c.RoleFits(pdOn("fresh", "A100", 1), 0, DefaultLimit))
}

// BenchmarkRoleCounts is one round's role counts for a prefill/decode ModelServing of 16
// placed groups on 64 8-GPU nodes (what berth-scheduler adds per multi-role ModelServing
// every publishing period): go test -run '^$' -bench RoleCounts ./pkg/capacity
func BenchmarkRoleCounts(b *testing.B) {
	ms := pdOn("pd", "A100", 2)
	ms.Spec.Replicas = ptr.To[int32](16)
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for i := range 64 {
		nodes = append(nodes, node(fmt.Sprintf("a100-%d", i), "A100"))
	}
	for g := range 16 {
		for ri := range ms.Spec.Template.Roles {
			for _, p := range rolePods(ms, g, &ms.Spec.Template.Roles[ri], 0) {
				p.Spec.NodeName = fmt.Sprintf("a100-%d", g*4)
				pods = append(pods, p)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		roleCounts(NewCounter(Cluster{Nodes: nodes, Pods: pods}), ms, DefaultLimit)
	}
}

// ModelServings of one template in one namespace are counted once a round; the shared
// count must be what each would get alone, including when a later one asks a higher
// limit than the count was made under, or differs in what builds its pods.
func TestAlikeModelServingsShareTheirCount(t *testing.T) {
	nodes := []*corev1.Node{node("h100-0", "H100"), node("h100-1", "H100")}
	alone := func(ms *workloadv1alpha1.ModelServing, limit int) int {
		return NewCounter(Cluster{Nodes: nodes}).Fits(ms, limit)
	}
	c := NewCounter(Cluster{Nodes: nodes})
	a, b := servingOn("a", "H100", 2, 1, 1), servingOn("b", "H100", 2, 1, 3) // replicas and images differ
	b.Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0].Image = "vllm:v2"
	assert.Equal(t, 2, c.Fits(a, 2), "capped at 2")
	assert.Equal(t, alone(b, DefaultLimit), c.Fits(b, DefaultLimit), "a higher limit than the shared count's is counted again")
	assert.Equal(t, 4, c.Fits(b, DefaultLimit))
	assert.Equal(t, 4, c.Fits(a, DefaultLimit))
	assert.Len(t, c.alike, 1, "a and b share one count")

	other := servingOn("c", "H100", 4, 1, 1) // other requests
	assert.Equal(t, alone(other, DefaultLimit), c.Fits(other, DefaultLimit))
	assert.Equal(t, 2, c.Fits(other, DefaultLimit))
	elsewhere := servingOn("d", "H100", 2, 1, 1)
	elsewhere.Namespace = "other"
	c.Fits(elsewhere, DefaultLimit)
	spread := servingOn("e", "H100", 2, 1, 1)
	spread.Spec.TopologySpreadConstraints = []workloadv1alpha1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone"}}
	assert.Equal(t, alone(spread, DefaultLimit), c.Fits(spread, DefaultLimit))
	assert.Len(t, c.alike, 3, "another template and another namespace count on their own; a spread ModelServing is not shared")
}
