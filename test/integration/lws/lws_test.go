package lws

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	leaderworkerset "sigs.k8s.io/lws/api/leaderworkerset/v1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// A LeaderWorkerSet as its users write one for multi-node vLLM: a Ray head with the API
// server as leader, Ray workers joining it by $(LWS_LEADER_ADDRESS), a whole 8-GPU node per
// pod, four pods per group (tensor parallel 8, pipeline parallel 4), two groups. The only
// Berth-specific line is schedulerName.
const vllmMultiNode = `
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: vllm
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 4
    restartPolicy: RecreateGroupOnPodRestart
    leaderTemplate:
      metadata:
        labels:
          role: leader
      spec:
        schedulerName: berth-scheduler
        containers:
        - name: vllm-leader
          image: vllm/vllm-openai:v0.8.5
          command: [sh, -c]
          args:
          - ray start --head --port=6379 && python3 -m vllm.entrypoints.openai.api_server --port 8080
            --model meta-llama/Llama-3.1-405B-Instruct --tensor-parallel-size 8 --pipeline-parallel-size $(LWS_GROUP_SIZE)
          resources:
            limits:
              nvidia.com/gpu: "8"
          ports:
          - containerPort: 8080
          readinessProbe:
            tcpSocket:
              port: 8080
    workerTemplate:
      metadata:
        labels:
          role: worker
      spec:
        schedulerName: berth-scheduler
        containers:
        - name: vllm-worker
          image: vllm/vllm-openai:v0.8.5
          command: [sh, -c]
          args: ["ray start --address=$(LWS_LEADER_ADDRESS):6379 --block"]
          resources:
            limits:
              nvidia.com/gpu: "8"
`

// The leaders, served by model name through berth-router: a ModelServer that selects them
// by LWS's own labels, as an LWS user would.
const vllmRouting = `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: vllm}
spec:
  model: llama-405b
  inferenceEngine: vLLM
  workloadSelector:
    matchLabels: {leaderworkerset.sigs.k8s.io/name: vllm, leaderworkerset.sigs.k8s.io/worker-index: "0"}
  workloadPort: {port: 8080}
---
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: vllm}
spec:
  modelName: llama-405b
  rules: [{name: default, targetModels: [{modelServerName: vllm}]}]
`

// The LeaderWorkerSet comes up without LWS's controller: a ModelServing it owns, a PodGroup
// per group, each group's four pods bound together or not at all, Running with LWS's labels
// and variables, its status mirrored (kubectl get lws), served through the router, scaled by
// its scale subresource, and gone with everything it made when deleted.
func TestLeaderWorkerSetRunsAsGangs(t *testing.T) {
	// Six nodes: room for one group of four whole-node pods and half of another.
	w := newWorld(t, 6)
	docs := append([]string{vllmMultiNode}, strings.Split(vllmRouting, "\n---\n")...)
	w.apply(docs...)

	// The ModelServing Kthena's LWS controller would make, on berth-scheduler.
	var ms *workloadv1alpha1.ModelServing
	w.eventually("the ModelServing exists", func() bool {
		var err error
		ms, err = w.modelServing("vllm")
		return err == nil
	})
	l := w.lws("vllm")
	assert.True(t, metav1.IsControlledBy(ms, l), "the LeaderWorkerSet owns its ModelServing")
	assert.Equal(t, "berth-scheduler", ms.Spec.SchedulerName)
	assert.Equal(t, int32(2), *ms.Spec.Replicas)
	require.Len(t, ms.Spec.Template.Roles, 1)
	assert.Equal(t, int32(3), ms.Spec.Template.Roles[0].WorkerReplicas)

	// One gang per group; one group fits, so it runs, and the other has no pod bound: a
	// group that cannot be placed whole is not placed at all.
	w.eventually("one group bound whole", func() bool {
		b := w.boundByGroup("vllm")
		return len(b) == 1 && (b["0"] == 4 || b["1"] == 4)
	})
	w.never("a pod of the other group bound on the two free nodes", 3*time.Second, func() bool { return len(w.boundByGroup("vllm")) > 1 })
	w.eventually("the LeaderWorkerSet reports one ready group of two", func() bool {
		l := w.lws("vllm")
		s, _, _ := condition(l.Status.Conditions, "Available")
		return l.Status.Replicas == 2 && l.Status.ReadyReplicas == 1 && s == "False"
	})

	// Two more nodes: the second group is placed, whole.
	w.addNodes(2, nil)
	l = w.waitAvailable("vllm")
	assert.Equal(t, int32(2), l.Status.ReadyReplicas)
	assert.Equal(t, int32(2), l.Status.UpdatedReplicas)
	assert.Equal(t, l.Generation, l.Status.ObservedGeneration)
	assert.Equal(t, "leaderworkerset.sigs.k8s.io/name=vllm,leaderworkerset.sigs.k8s.io/worker-index=0", l.Status.HPAPodSelector)
	_, reason, msg := condition(l.Status.Conditions, "Available")
	assert.Equal(t, "AllGroupsReady", reason)
	assert.Equal(t, "2 of 2 groups ready (ModelServing vllm)", msg)

	var pgs volcanov1beta1.PodGroupList
	require.NoError(t, cl.List(w.ctx, &pgs, client.InNamespace(w.ns)))
	require.Len(t, pgs.Items, 2, "a PodGroup per group")
	for _, pg := range pgs.Items {
		assert.Equal(t, int32(4), pg.Spec.MinMember, "the group's four pods are one gang")
	}

	pods := w.pods("vllm")
	require.Len(t, pods, 8)
	nodes := map[string]bool{}
	for _, p := range pods {
		assert.Equal(t, corev1.PodRunning, p.Status.Phase, p.Name)
		assert.Equal(t, "berth-scheduler", p.Spec.SchedulerName)
		nodes[p.Spec.NodeName] = true
		idx := p.Labels[leaderworkerset.WorkerIndexLabelKey]
		group := p.Labels[leaderworkerset.GroupIndexLabelKey]
		assert.Contains(t, []string{"0", "1"}, group, p.Name)
		assert.Len(t, p.Labels[leaderworkerset.GroupUniqueHashLabelKey], 40, "LWS's group key")
		assert.Equal(t, "4", p.Annotations[leaderworkerset.SizeAnnotationKey])
		env := map[string]string{}
		for _, e := range p.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		assert.Equal(t, "4", env["LWS_GROUP_SIZE"], p.Name)
		assert.Equal(t, idx, env["LWS_WORKER_INDEX"], p.Name)
		assert.True(t, strings.HasSuffix(env["LWS_LEADER_ADDRESS"], "."+w.ns+".svc"), "the leader's DNS name: %s", env["LWS_LEADER_ADDRESS"])
		if idx == "0" {
			assert.Equal(t, "leader", p.Labels["role"], "the leader template's labels")
			assert.Equal(t, "vllm-leader", p.Spec.Containers[0].Name)
		} else {
			assert.Contains(t, []string{"1", "2", "3"}, idx)
			assert.Equal(t, "worker", p.Labels["role"])
			assert.Equal(t, "vllm-worker", p.Spec.Containers[0].Name)
		}
	}
	assert.Len(t, nodes, 8, "a whole node per pod")
	assert.Contains(t, w.event("vllm", "Created"), "created ModelServing vllm: 2 groups of 4 pods on berth-scheduler")

	// Served by the simulated engines of the leaders, through the router.
	assert.NotEmpty(t, w.chat("llama-405b"))

	// kubectl scale lws vllm --replicas=1 (what an HPA on it does).
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":1}}`))
	require.NoError(t, cl.SubResource("scale").Patch(w.ctx, w.lws("vllm"), patch))
	w.eventually("one group left, the LeaderWorkerSet reporting it", func() bool {
		ms, err := w.modelServing("vllm")
		l := w.lws("vllm")
		s, _, _ := condition(l.Status.Conditions, "Available")
		return err == nil && *ms.Spec.Replicas == 1 && len(w.pods("vllm")) == 4 && l.Status.Replicas == 1 && s == "True"
	})

	// Deleting the LeaderWorkerSet deletes what it made.
	require.NoError(t, cl.Delete(w.ctx, w.lws("vllm")))
	w.eventually("the ModelServing, PodGroups and pods gone", func() bool {
		_, err := w.modelServing("vllm")
		var pgs volcanov1beta1.PodGroupList
		require.NoError(t, cl.List(w.ctx, &pgs, client.InNamespace(w.ns)))
		return apierrors.IsNotFound(err) && len(pgs.Items) == 0 && len(w.pods("vllm")) == 0
	})
}

// A LeaderWorkerSet for another scheduler is LWS's controller's: Berth makes nothing for it
// and writes nothing on it. One that stops naming berth-scheduler loses the ModelServing
// Berth made for it.
func TestLeaderWorkerSetOfAnotherSchedulerIsLeftAlone(t *testing.T) {
	w := newWorld(t, 1)
	w.apply(`
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: theirs}
spec:
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        containers: [{name: engine, image: sglang}]
`, `
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: switching}
spec:
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        schedulerName: berth-scheduler
        containers: [{name: engine, image: sglang, resources: {limits: {nvidia.com/gpu: "1"}}}]
`)
	w.waitAvailable("switching")
	w.never("a ModelServing or a status for the other scheduler's LeaderWorkerSet", 2*time.Second, func() bool {
		_, err := w.modelServing("theirs")
		return !apierrors.IsNotFound(err) || len(w.lws("theirs").Status.Conditions) > 0
	})

	w.patchLWS("switching", `{"spec":{"leaderWorkerTemplate":{"workerTemplate":{"spec":{"schedulerName":"default-scheduler"}}}}}`)
	w.eventually("the ModelServing and its pods deleted", func() bool {
		_, err := w.modelServing("switching")
		return apierrors.IsNotFound(err) && len(w.pods("switching")) == 0
	})
	assert.Equal(t, "deleted ModelServing switching: the pod templates no longer name berth-scheduler", w.event("switching", "Released"))
}

// Bad input is said on the LeaderWorkerSet, with a warning event naming the field, and
// nothing is created; fixing it brings the LeaderWorkerSet up.
func TestLeaderWorkerSetBadInput(t *testing.T) {
	w := newWorld(t, 2)
	w.apply(`
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: size-zero}
spec:
  leaderWorkerTemplate:
    size: 0
    workerTemplate:
      spec:
        schedulerName: berth-scheduler
        containers: [{name: engine, image: vllm, resources: {limits: {nvidia.com/gpu: "1"}}}]
`, `
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: no-workers}
spec:
  leaderWorkerTemplate:
    size: 3
    leaderTemplate:
      spec:
        schedulerName: berth-scheduler
        containers: [{name: engine, image: vllm}]
    workerTemplate:
      metadata: {labels: {role: worker}}
`, `
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: mixed}
spec:
  leaderWorkerTemplate:
    size: 2
    leaderTemplate:
      spec:
        schedulerName: berth-scheduler
        containers: [{name: engine, image: vllm}]
    workerTemplate:
      spec:
        containers: [{name: engine, image: vllm}]
`)
	for name, want := range map[string][]string{
		"size-zero":  {"InvalidSpec", "spec.leaderWorkerTemplate.size: 0: must be at least 1 (a group is its leader and size − 1 workers)"},
		"no-workers": {"InvalidSpec", "spec.leaderWorkerTemplate.workerTemplate.spec.containers: required: the workers are made from it"},
		"mixed": {"SchedulerMismatch", "spec.leaderWorkerTemplate.leaderTemplate.spec.schedulerName is berth-scheduler, " +
			"spec.leaderWorkerTemplate.workerTemplate.spec.schedulerName is default-scheduler: a group's pods are placed together by one scheduler; name berth-scheduler in both"},
	} {
		w.eventually(name+" reports "+want[0], func() bool {
			s, reason, msg := condition(w.lws(name).Status.Conditions, "Available")
			return s == "False" && reason == want[0] && msg == want[1]
		})
		assert.Equal(t, want[1], w.event(name, want[0]), "a warning event says it too")
		s, _, _ := condition(w.lws(name).Status.Conditions, "Progressing")
		assert.Equal(t, "False", s, "%s: nothing progresses", name)
		_, err := w.modelServing(name)
		assert.True(t, apierrors.IsNotFound(err), "no ModelServing for %s", name)
	}
	pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, pods.Items)

	// Fixed, it comes up.
	w.patchLWS("size-zero", `{"spec":{"leaderWorkerTemplate":{"size":2}}}`)
	w.waitAvailable("size-zero")
	assert.Len(t, w.pods("size-zero"), 2)
}

// LWS's exclusive topology: each group in one domain of the annotated node label, and no two
// groups in one domain. Two racks hold two groups; the third waits for a third rack.
func TestLeaderWorkerSetExclusiveTopology(t *testing.T) {
	const rack = "test.berth.sh/rack"
	w := newWorld(t, 0)
	w.addNodes(2, map[string]string{rack: "a"})
	w.addNodes(2, map[string]string{rack: "b"})
	w.apply(`
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: racked
  annotations:
    leaderworkerset.sigs.k8s.io/exclusive-topology: test.berth.sh/rack
spec:
  replicas: 3
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        schedulerName: berth-scheduler
        containers: [{name: engine, image: vllm, resources: {limits: {nvidia.com/gpu: "1"}}}]
`)
	rackOf := func() map[string]string {
		var nodes corev1.NodeList
		require.NoError(t, cl.List(w.ctx, &nodes))
		out := map[string]string{}
		for _, n := range nodes.Items {
			out[n.Name] = n.Labels[rack]
		}
		return out
	}
	// groupRacks is the set of racks each group's bound pods are in.
	groupRacks := func() map[string][]string {
		racks := rackOf()
		out := map[string][]string{}
		for _, p := range w.pods("racked") {
			if p.Spec.NodeName == "" {
				continue
			}
			g := p.Labels[leaderworkerset.GroupIndexLabelKey]
			if r := racks[p.Spec.NodeName]; !slices.Contains(out[g], r) {
				out[g] = append(out[g], r)
			}
		}
		return out
	}
	w.eventually("two groups bound, each in a rack of its own", func() bool {
		return len(groupRacks()) == 2 && w.lws("racked").Status.ReadyReplicas == 2
	})
	w.never("a third group bound beside another", 3*time.Second, func() bool { return len(groupRacks()) > 2 })
	check := func() {
		used := map[string]string{}
		for g, racks := range groupRacks() {
			require.Len(t, racks, 1, "group %s spans racks %v", g, racks)
			require.Empty(t, used[racks[0]], "groups %s and %s share rack %s", g, used[racks[0]], racks[0])
			used[racks[0]] = g
		}
	}
	check()

	w.addNodes(2, map[string]string{rack: "c"})
	w.waitAvailable("racked")
	require.Len(t, groupRacks(), 3)
	check()
	assert.Equal(t, int32(3), w.lws("racked").Status.ReadyReplicas)
}
