package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/quantile"
	"github.com/berth-sh/berth/pkg/sim"
)

func TestStreamIsDeterministicAndBounded(t *testing.T) {
	const pool = 16 * gpusPerNode
	a := newStream(1, pool, 2, 4*time.Second)
	b := newStream(1, pool, 2, 4*time.Second)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different streams")
	}
	if reflect.DeepEqual(a, newStream(2, pool, 2, 4*time.Second)) {
		t.Fatal("different seeds, same stream")
	}
	var total int64
	for i, g := range a {
		total += g.gpus()
		if g.gpus() > pool/2 {
			t.Errorf("%s asks %d GPUs, more than half the pool", g.name, g.gpus())
		}
		if i > 0 && g.at < a[i-1].at {
			t.Errorf("%s arrives before %s", g.name, a[i-1].name)
		}
		if g.at > 4*time.Second {
			t.Errorf("%s arrives at %s, after the stream", g.name, g.at)
		}
		if len(g.roles) < 1 || len(g.roles) > 3 {
			t.Errorf("%s has %d roles", g.name, len(g.roles))
		}
		for _, r := range g.roles {
			if r.replicas < 1 || r.replicas > 3 || r.workers < 0 || r.workers > 3 || r.min < 1 || r.min > r.replicas {
				t.Errorf("%s: bad role %+v", g.name, r)
			}
		}
	}
	if total < 2*pool || total > 2*pool+pool/2 {
		t.Errorf("stream asks %d GPUs, want about %d", total, 2*pool)
	}
}

func TestPodGroupsAsTheControllerWritesThem(t *testing.T) {
	g := gangSpec{name: "gang-000", roles: []roleSpec{
		{name: "prefill", replicas: 3, workers: 1, min: 2, gpus: 4},
		{name: "decode", replicas: 1, workers: 0, min: 1, gpus: 8},
	}}
	pg := g.volcanoPodGroup("ns")
	if pg.Spec.MinMember != 5 {
		t.Errorf("minMember %d, want 5", pg.Spec.MinMember)
	}
	if want := map[string]int32{"prefill-0": 2, "prefill-1": 2, "decode-0": 1}; !reflect.DeepEqual(pg.Spec.MinTaskMember, want) {
		t.Errorf("minTaskMember %v, want %v", pg.Spec.MinTaskMember, want)
	}
	if gpus := (*pg.Spec.MinResources)[sim.GPUResource]; gpus.Value() != 4*4+8 {
		t.Errorf("minResources GPUs %s, want 24", gpus.String())
	}
	if len(pg.Spec.SubGroupPolicy) != 1 || pg.Spec.SubGroupPolicy[0].Name != "prefill" || *pg.Spec.SubGroupPolicy[0].SubGroupSize != 2 ||
		*pg.Spec.SubGroupPolicy[0].MinSubGroups != 0 || !reflect.DeepEqual(pg.Spec.SubGroupPolicy[0].MatchLabelKeys, []string{labelRoleID}) {
		t.Errorf("subGroupPolicy %+v", pg.Spec.SubGroupPolicy)
	}
	if n := g.nativePodGroup("ns").Spec.SchedulingPolicy.Gang.MinCount; n != 5 {
		t.Errorf("native minCount %d, want 5", n)
	}
	pods := g.podsFor("ns", berth)
	if len(pods) != 7 {
		t.Fatalf("%d pods, want 7", len(pods))
	}
	p := pods[1] // prefill-0's worker
	if p.Name != "gang-000-prefill-0-1" || p.Annotations["volcano.sh/task-spec"] != "prefill-0" ||
		p.Annotations["scheduling.k8s.io/group-name"] != "gang-000" || p.Labels[labelRoleID] != "prefill-0" || p.Labels[labelEntry] != "" {
		t.Errorf("pod %s: labels %v annotations %v", p.Name, p.Labels, p.Annotations)
	}
	if pods[0].Labels[labelEntry] != "true" || pods[0].Spec.NodeSelector[poolKey] != poolValue || len(pods[0].Spec.Tolerations) != 1 {
		t.Errorf("entry pod %s: labels %v selector %v", pods[0].Name, pods[0].Labels, pods[0].Spec.NodeSelector)
	}
	if n := g.podsFor("ns", native)[0]; n.Spec.SchedulingGroup == nil || *n.Spec.SchedulingGroup.PodGroupName != "gang-000" || n.Annotations != nil {
		t.Errorf("native pod %+v", n.Spec.SchedulingGroup)
	}
}

func boundPod(name, group, task, node string, gpus int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelGroup: group, labelRoleID: task}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{sim.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}},
	}
}

func TestTrackerPartialAndStarved(t *testing.T) {
	stream := []gangSpec{
		{name: "a", roles: []roleSpec{{name: "r", replicas: 2, workers: 1, min: 1, gpus: 4}}}, // minimum: r-0 (2 pods × 4)
		{name: "b", roles: []roleSpec{{name: "r", replicas: 1, workers: 0, min: 1, gpus: 8}}}, // minimum: 1 × 8
		{name: "c", roles: []roleSpec{{name: "r", replicas: 1, workers: 1, min: 1, gpus: 8}}}, // minimum: 2 × 8
		{name: "d", roles: []roleSpec{{name: "r", replicas: 1, workers: 1, min: 1, gpus: 1}}}, // bound whole, outside the pool
	}
	tr := newTracker(stream, 2*time.Second)
	for _, g := range stream {
		tr.created(g.name)
	}
	t0 := time.Unix(1000, 0)
	// a: two pods bound, but of two different replicas: enough pods, not its minimum.
	tr.observe(boundPod("a-r-0-0", "a", "r-0", "gpu-000", 4), t0)
	tr.observe(boundPod("a-r-1-0", "a", "r-1", "gpu-000", 4), t0)
	// d: its two pods bind 100ms apart, a moment partly bound that is not a partial group.
	tr.observe(boundPod("d-r-0-0", "d", "r-0", "other", 1), t0)
	tr.observe(boundPod("d-r-0-1", "d", "r-0", "other", 1), t0.Add(100*time.Millisecond))
	tr.checkPartial(t0.Add(time.Second))
	if s := tr.snapshot(); s.partial != 0 {
		t.Fatalf("partial before the window: %+v", s)
	}
	tr.checkPartial(t0.Add(3 * time.Second))
	s := tr.snapshot()
	if s.partial != 1 || s.partialByCount != 0 || s.minPlaced != 1 || s.usedGPUs != 10 || s.everPartial != 2 || s.longestPartial != 100*time.Millisecond {
		t.Fatalf("snapshot %+v", s)
	}
	// Pool of 2 nodes: gpu-000 full, gpu-001 free. b (8) fits, c (2 × 8) does not,
	// a is missing one pod of 4: fits.
	pool := []string{"gpu-000", "gpu-001"}
	if n, desc := tr.starved(pool, nil, nil); n != 2 || !reflect.DeepEqual(desc, []string{"a needs 1×4 GPUs", "b needs 1×8 GPUs"}) {
		t.Errorf("starved %d %q, want 2 (a and b)", n, desc)
	}
	// Reserved for b: b is not counted, and a no longer fits.
	if n, _ := tr.starved(pool, map[string]int64{"gpu-001": 8}, map[string]bool{"b": true}); n != 0 {
		t.Errorf("starved %d with a reservation, want 0", n)
	}
	// A reservation beyond bounds is not trusted: b keeping 16 GPUs for its 8 missing, or two
	// groups reserving at once, hides nothing (a and b count as starved again).
	for _, tc := range []struct {
		reserved map[string]int64
		holders  map[string]bool
	}{
		{map[string]int64{"gpu-001": 8, "gpu-000": 8}, map[string]bool{"b": true}},
		{map[string]int64{"gpu-001": 8}, map[string]bool{"b": true, "c": true}},
	} {
		if n, desc := tr.starved(pool, tc.reserved, tc.holders); n != 2 || !strings.HasPrefix(desc[0], "reservation not trusted") {
			t.Errorf("starved %d %q with reservation %v by %v, want 2 and the reservation not trusted", n, desc, tc.reserved, tc.holders)
		}
	}
	res, err := parseReservation(`{"gpu-001":{"nvidia.com/gpu":"8","cpu":"1"}}`)
	if err != nil || res["gpu-001"] != 8 {
		t.Errorf("parseReservation: %v %v", res, err)
	}
}

func TestFitsIsFirstFitDecreasing(t *testing.T) {
	// Two nodes of 8 free: 4+4 and 8 fit only if the 8 goes first.
	if !fits([]int64{8, 8}, []unit{{pods: 2, gpus: 2}, {pods: 1, gpus: 4}, {pods: 1, gpus: 8}}) {
		t.Error("FFD should fit 8, 4, 2+2 on two nodes of 8")
	}
	if fits([]int64{8, 7}, []unit{{pods: 2, gpus: 8}}) {
		t.Error("two 8-GPU pods do not fit 8 + 7")
	}
}

func TestMedianAndRotate(t *testing.T) {
	if m := quantile.Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median %v", m)
	}
	if m := quantile.Median([]float64{4, 1}); m != 2.5 {
		t.Errorf("median %v", m)
	}
	if r := rotate([]mode{native, berth, defaultNoGang}, 1); !reflect.DeepEqual(r, []mode{berth, defaultNoGang, native}) {
		t.Errorf("rotate %v", r)
	}
}
