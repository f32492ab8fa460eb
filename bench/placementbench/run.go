package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	volcanobatchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/bench/internal/fanout"
	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/inprocess"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

type mode string

const (
	berthMode   mode = "berth"
	defaultMode mode = "default"
)

// Every pod asks this much besides its GPUs: small next to a node (64 CPU, 512Gi), so
// GPUs are the only resource that runs out.
var (
	podCPU    = resource.MustParse("500m")
	podMemory = resource.MustParse("1Gi")
)

type bench struct {
	cp      *controlplane.ControlPlane
	kube    kubernetes.Interface
	vc      volcanoclient.Interface
	fabric  *fabric
	timeout time.Duration
	// stopAfter: feeding stops at the first failed group of whole-node pods once this many
	// groups have failed (1: at that group).
	stopAfter int
}

// result is one scheduler's run over the stream.
type result struct {
	mode mode
	seed uint64

	// Up to the first group that could not be placed whole.
	firstFailure      *groupSpec
	firstFailureWhy   string
	firstFailureBound int // pods of that group bound before it was withdrawn
	groupsPlaced      int
	podsPlaced        int
	gpusAtFirst       int
	freeNodesAtFirst  int
	spread            spread
	feeding           time.Duration // first pod created to the last placed group bound
	// spans sums the placed groups' spans (groupSpan) over the same groups.
	spans groupSpan

	// Fed on until a group of whole-node (8-GPU) pods could not be placed.
	bigFailure  *groupSpec
	gpusAtBig   int
	groupsFed   int
	placedAfter int // groups placed after the first failure
	elapsed     time.Duration

	// Over every group fed.
	// The stream's bounds (bound.go), the same for every mode of a seed; bounded is false
	// where they do not apply (no NVLink domains, or pods smaller than a node).
	ceiling, bestFit streamBound
	bounded          bool

	failures         int // groups not placed whole
	feasibleFailures int // of them, groups the fit check says could have been placed
	gpusAtEnd        int

	// For the figures (figures.go): every group placed whole, in order; the first
	// placedAtFirst of them were placed before the first failure.
	placed        []placement
	placedAtFirst int
}

// groupSpan is where one group's time in the serial feed goes, as the bench sees it: from
// the feed's start to its last pod created (berth's includes its PodGroup's create), from
// there to the first pod seen bound, and from the first bound to the last (a gang binds
// its pods together once the last is placed; the default scheduler binds each as it is
// scored). The three add up to the group's time from its first create to its last bind.
// Summed over groups in result.spans.
type groupSpan struct {
	groups                int
	create, first, spread time.Duration
}

func (s *groupSpan) add(o groupSpan) {
	s.groups += o.groups
	s.create, s.first, s.spread = s.create+o.create, s.first+o.first, s.spread+o.spread
}

// perGroup is a span's mean per group, in ms.
func (s groupSpan) perGroup(d time.Duration) (float64, bool) {
	if s.groups == 0 {
		return 0, false
	}
	return float64(d) / float64(time.Millisecond) / float64(s.groups), true
}

// run feeds the stream to one scheduler, one group at a time, on the empty fabric.
func (b *bench) run(ctx context.Context, m mode, seed uint64, groups []groupSpec) (res result, err error) {
	res.mode, res.seed = m, seed
	started := time.Now()
	ns := fmt.Sprintf("placement-%s-%d", m, seed)
	label := fmt.Sprintf("%s seed %d", m, seed)
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	if b.fabric.dra {
		if err := b.createClaimTemplates(ctx, ns, groups); err != nil {
			return res, err
		}
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	tr, err := startTracker(runCtx, b.kube, ns)
	if err != nil {
		return res, err
	}

	schedCtx, stopScheduler := context.WithCancel(ctx)
	exited := make(chan struct{})
	var schedErr error
	go func() {
		defer close(exited)
		schedErr = b.runScheduler(schedCtx, m)
	}()
	defer func() {
		stopScheduler()
		<-exited
		if cerr := b.cleanup(ctx, ns); err == nil {
			err = cerr
		}
	}()
	fail := func(err error) (result, error) {
		if errors.Is(err, errSchedulerExited) {
			err = fmt.Errorf("%w: %v", err, schedErr)
		}
		return res, fmt.Errorf("%s: %w", label, err)
	}

	// Warm up: the scheduler has synced its informers once it binds a pod. The pod asks
	// no GPU and is deleted before the stream starts.
	if _, err := b.kube.CoreV1().Pods(ns).Create(ctx, b.pod(ns, m, "warmup", nil, ""), metav1.CreateOptions{}); err != nil {
		return fail(err)
	}
	if _, err := tr.waitFor([]string{"warmup"}, 2*time.Minute, exited, bound); err != nil {
		return fail(fmt.Errorf("warm-up pod: %w", err))
	}
	if err := b.withdraw(ctx, tr, ns, m, nil, []string{"warmup"}); err != nil {
		return fail(err)
	}

	led := newLedger(b.fabric)
	feedStart := time.Now()
	lastPlaced := feedStart
	for i, g := range groups {
		fits := b.fabric.fits(led, g)
		nodes, why, boundPods, span, err := b.feed(ctx, tr, exited, ns, m, g)
		if err != nil {
			return fail(err)
		}
		res.groupsFed = i + 1
		if nodes != nil {
			led.add(g, nodes)
			if res.firstFailure == nil {
				lastPlaced = time.Now()
				res.spans.add(span)
			} else {
				res.placedAfter++
			}
		} else {
			res.failures++
			if fits {
				res.feasibleFailures++
				fmt.Fprintf(os.Stderr, "  %s: group %d (%s) failed, yet the fit check places it: %s\n", label, g.index, g, why)
			}
			if res.firstFailure == nil {
				res.firstFailure, res.firstFailureWhy, res.firstFailureBound = &g, why, boundPods
				res.groupsPlaced, res.podsPlaced = len(led.groups), led.pods()
				res.gpusAtFirst, res.freeNodesAtFirst, res.spread = led.gpus(), led.freeNodes(), led.spread()
				res.feeding = lastPlaced.Sub(feedStart)
				res.placedAtFirst = len(led.groups)
				fmt.Fprintf(os.Stderr, "  %s: first failure at group %d (%s) after %d groups, %d/%d GPUs: %s\n",
					label, g.index, g, res.groupsPlaced, res.gpusAtFirst, b.fabric.totalGPUs(), why)
			}
			if g.gpus >= b.fabric.gpusPerNode && res.bigFailure == nil {
				res.bigFailure, res.gpusAtBig = &g, led.gpus()
				fmt.Fprintf(os.Stderr, "  %s: first whole-node group failed at group %d (%s), %d/%d GPUs\n",
					label, g.index, g, res.gpusAtBig, b.fabric.totalGPUs())
			}
			if res.bigFailure != nil && res.failures >= max(b.stopAfter, 1) {
				break
			}
		}
		if (i+1)%100 == 0 {
			fmt.Fprintf(os.Stderr, "  %s: %d groups fed, %d placed, %d/%d GPUs, %s\n",
				label, i+1, len(led.groups), led.gpus(), b.fabric.totalGPUs(), time.Since(started).Round(time.Second))
		}
	}
	if res.firstFailure == nil { // the stream ran out first
		res.groupsPlaced, res.podsPlaced = len(led.groups), led.pods()
		res.gpusAtFirst, res.freeNodesAtFirst, res.spread = led.gpus(), led.freeNodes(), led.spread()
		res.feeding = lastPlaced.Sub(feedStart)
		res.placedAtFirst = len(led.groups)
	}
	res.gpusAtEnd, res.placed = led.gpus(), led.groups
	res.elapsed = time.Since(started)
	return res, nil
}

// feed creates one group and waits until every pod is bound or reported unschedulable.
// A group not bound whole is withdrawn (its pods and PodGroup deleted) and nodes is nil;
// why is the scheduler's message and boundPods how many of its pods had been bound. span is
// where a placed group's time went.
func (b *bench) feed(ctx context.Context, tr *tracker, exited <-chan struct{}, ns string, m mode, g groupSpec) (nodes []string, why string, boundPods int, span groupSpan, err error) {
	start := time.Now()
	group := fmt.Sprintf("g%05d", g.index)
	names := make([]string, g.pods)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", group, i)
	}
	if m == berthMode {
		if _, err := b.vc.SchedulingV1beta1().PodGroups(ns).Create(ctx, podGroup(ns, group, g, b.fabric), metav1.CreateOptions{}); err != nil {
			return nil, "", 0, span, err
		}
	}
	if err := fanout.Run(len(names), len(names), func(i int) error {
		_, err := b.kube.CoreV1().Pods(ns).Create(ctx, b.pod(ns, m, names[i], &g, group), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, "", 0, span, err
	}
	created := time.Now()
	states, err := tr.waitFor(names, b.timeout, exited, resolved)
	switch {
	case errors.Is(err, errTimeout):
		why = fmt.Sprintf("not resolved within %s", b.timeout)
		fmt.Fprintf(os.Stderr, "  %s: group %d (%s) %s\n", m, g.index, g, why)
	case err != nil:
		return nil, "", 0, span, err
	}
	var first, last time.Time
	for _, st := range states {
		switch {
		case st == nil:
		case st.node != "":
			nodes = append(nodes, st.node)
			if first.IsZero() || st.boundAt.Before(first) {
				first = st.boundAt
			}
			if st.boundAt.After(last) {
				last = st.boundAt
			}
		case why == "":
			why = st.message
		}
	}
	if len(nodes) == len(names) {
		// (A pod may be seen bound before the last create returns: the spans after the
		// creates start there, so the three add up to the group's time.)
		from := first
		if from.Before(created) {
			from = created
		}
		span = groupSpan{groups: 1, create: created.Sub(start), first: from.Sub(created), spread: max(0, last.Sub(from))}
		return nodes, "", 0, span, nil
	}
	if err := b.withdraw(ctx, tr, ns, m, &group, names); err != nil {
		return nil, "", 0, span, err
	}
	return nil, why, len(nodes), span, nil
}

// withdraw deletes pods (and the PodGroup) and waits until the watch reports them gone.
func (b *bench) withdraw(ctx context.Context, tr *tracker, ns string, m mode, group *string, names []string) error {
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	if err := fanout.Run(len(names), len(names), func(i int) error {
		return b.kube.CoreV1().Pods(ns).Delete(ctx, names[i], zero)
	}); err != nil {
		return err
	}
	if m == berthMode && group != nil {
		if err := b.vc.SchedulingV1beta1().PodGroups(ns).Delete(ctx, *group, zero); err != nil {
			return err
		}
	}
	if _, err := tr.waitFor(names, time.Minute, nil, gone); err != nil {
		return fmt.Errorf("withdrawing %v: %w", names, err)
	}
	if b.fabric.dra {
		// The ResourceClaim controller deletes a withdrawn pod's claim, which frees its
		// devices; until then the next group would find them taken.
		if err := b.waitClaimsGone(ctx, ns, names); err != nil {
			return fmt.Errorf("withdrawing %v: %w", names, err)
		}
	}
	// The scheduler's informer sees the same deletions (of pods and claims) as the bench;
	// give it a moment so the next group is not judged against capacity the bench already
	// counts free.
	time.Sleep(50 * time.Millisecond)
	return nil
}

func bound(states []*podState) bool {
	for _, st := range states {
		if st == nil || st.node == "" {
			return false
		}
	}
	return true
}

// pod is one pod of group g (nil for the warm-up pod). Berth's pods carry what
// berth-controller writes: the PodGroup name and the task (one role replica per group).
func (b *bench) pod(ns string, m mode, name string, g *groupSpec, group string) *corev1.Pod {
	requests := corev1.ResourceList{corev1.ResourceCPU: podCPU, corev1.ResourceMemory: podMemory}
	limits := corev1.ResourceList{}
	if g != nil && !b.fabric.dra {
		gpus := *resource.NewQuantity(int64(g.gpus), resource.DecimalSI)
		requests[sim.GPUResource], limits[sim.GPUResource] = gpus, gpus
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName: corev1.DefaultSchedulerName,
			Containers: []corev1.Container{{Name: "engine", Image: "vllm/vllm-openai:v0.11.0",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}},
		},
	}
	if g != nil && b.fabric.dra {
		// The same template for both schedulers: one claim per pod, its GPUs on one node.
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(claimTemplateName(g.gpus))}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	}
	if m == berthMode {
		p.Spec.SchedulerName = workloadv1alpha1.BerthSchedulerName
		if group != "" {
			p.Annotations = map[string]string{volcanov1beta1.KubeGroupNameAnnotationKey: group, volcanobatchv1alpha1.TaskSpecKey: "replica-0"}
		}
	}
	return p
}

// podGroup is the Volcano PodGroup of a group: all pods or none, minResources the pods'
// summed requests (GPUs only when they are requests, not DRA claims), and inside one leaf if
// the scheduler can (soft, tier 1) or, on a fabric of NVLink domains, inside one domain
// (hard, the tier named nvlink), as a tensor-parallel replica must be.
func podGroup(ns, name string, g groupSpec, f *fabric) *volcanov1beta1.PodGroup {
	n := int64(g.pods)
	cpu, mem := podCPU.DeepCopy(), podMemory.DeepCopy()
	cpu.SetMilli(cpu.MilliValue() * n)
	mem.Set(mem.Value() * n)
	minResources := corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}
	if !f.dra {
		minResources[sim.GPUResource] = *resource.NewQuantity(int64(g.gpus)*n, resource.DecimalSI)
	}
	topology := &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.SoftNetworkTopologyMode, HighestTierAllowed: ptr.To(1)}
	if f.hasDomains() {
		topology = &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: sim.NVLinkTierName}
	}
	return &volcanov1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: volcanov1beta1.PodGroupSpec{
			MinMember:       int32(g.pods),
			MinResources:    &minResources,
			NetworkTopology: topology,
		},
	}
}

// runScheduler runs berth-scheduler with the shipped profile, or kube-scheduler's default
// profile, until ctx ends.
func (b *bench) runScheduler(ctx context.Context, m mode) error {
	dir, err := os.MkdirTemp("", "placementbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := b.cp.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	if m == berthMode {
		return inprocess.RunScheduler(ctx, dir, kubeconfig, inprocess.SchedulerOptions{})
	}
	return inprocess.RunDefaultScheduler(ctx, dir, kubeconfig, inprocess.BenchRate)
}

// cleanup deletes the run's pods and PodGroups and waits until none is left, so the next
// scheduler starts on an empty fabric.
func (b *bench) cleanup(ctx context.Context, ns string) error {
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	if err := b.kube.CoreV1().Pods(ns).DeleteCollection(ctx, zero, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := b.vc.SchedulingV1beta1().PodGroups(ns).DeleteCollection(ctx, zero, metav1.ListOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := b.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pgs, err := b.vc.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) > 0 || len(pgs.Items) > 0 {
			return false, err
		}
		claims, err := b.kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == 0, err
	})
}

// claimTemplateName names the ResourceClaimTemplate of a pod of gpus DRA GPUs.
func claimTemplateName(gpus int) string { return fmt.Sprintf("gpus-%d", gpus) }

// createClaimTemplates creates one ResourceClaimTemplate per pod size of the stream: gpus
// whole GPUs of the gpu.nvidia.com DeviceClass.
func (b *bench) createClaimTemplates(ctx context.Context, ns string, groups []groupSpec) error {
	done := map[int]bool{}
	for _, g := range groups {
		if done[g.gpus] {
			continue
		}
		done[g.gpus] = true
		t := &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claimTemplateName(g.gpus)},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: sim.GPUDeviceClassName, AllocationMode: resourcev1.DeviceAllocationModeExactCount,
					Count: int64(g.gpus)}}},
			}}},
		}
		if _, err := b.kube.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// waitClaimsGone waits until no ResourceClaim made for the pods is left.
func (b *bench) waitClaimsGone(ctx context.Context, ns string, pods []string) error {
	of := map[string]bool{}
	for _, p := range pods {
		of[p] = true
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		claims, err := b.kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range claims.Items {
			for _, o := range c.OwnerReferences {
				if o.Kind == "Pod" && of[o.Name] {
					return false, nil
				}
			}
		}
		return true, nil
	})
}
