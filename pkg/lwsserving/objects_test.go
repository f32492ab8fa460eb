package lwsserving

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	lws "sigs.k8s.io/lws/api/leaderworkerset/v1"
	"sigs.k8s.io/yaml"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// decode reads a LeaderWorkerSet as a user writes it, strictly.
func decode(t *testing.T, doc string) *lws.LeaderWorkerSet {
	t.Helper()
	var l lws.LeaderWorkerSet
	require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &l))
	return &l
}

// A leader with three workers, two groups, on berth-scheduler, with LWS's defaults as the
// CRD writes them (restart policy, rolling update).
const leaderWorkers = `
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: vllm
  namespace: team
  annotations:
    leaderworkerset.sigs.k8s.io/exclusive-topology: network.berth.sh/leaf
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 4
    restartPolicy: RecreateGroupOnPodRestart
    leaderTemplate:
      metadata:
        labels: {role: leader}
      spec:
        schedulerName: berth-scheduler
        containers:
        - name: vllm-leader
          image: vllm/vllm-openai
          args: [--pipeline-parallel-size, $(LWS_GROUP_SIZE)]
    workerTemplate:
      metadata:
        labels: {role: worker}
      spec:
        schedulerName: berth-scheduler
        containers:
        - name: vllm-worker
          image: vllm/vllm-openai
          args: [--address, $(LWS_LEADER_ADDRESS)]
  rolloutStrategy:
    type: RollingUpdate
    rollingUpdateConfiguration:
      maxUnavailable: 1
      maxSurge: 1
      partition: 1
`

func TestBuildModelServing(t *testing.T) {
	l := decode(t, leaderWorkers)
	require.Equal(t, Berths, Claimed(l))
	require.Nil(t, Validate(l))
	ms := BuildModelServing(l)

	assert.Equal(t, "vllm", ms.Name, "Kthena's name: the LeaderWorkerSet's")
	assert.Equal(t, "team", ms.Namespace)
	assert.Equal(t, "vllm", ms.Labels["leaderworkerset.sigs.k8s.io/name"])
	assert.Equal(t, "true", ms.Annotations[workloadv1alpha1.LeaderWorkerSetCompatAnnotation], "pods get LWS_LEADER_ADDRESS and the rest")
	assert.Equal(t, int32(2), *ms.Spec.Replicas)
	assert.Equal(t, "berth-scheduler", ms.Spec.SchedulerName, "a PodGroup per group, placed as a gang")
	assert.Equal(t, []workloadv1alpha1.PluginSpec{{Name: "lws-standard-labels", Type: workloadv1alpha1.PluginTypeBuiltIn}}, ms.Spec.Plugins)
	assert.Equal(t, workloadv1alpha1.ServingGroupRecreate, ms.Spec.RecoveryPolicy)
	assert.Equal(t, &workloadv1alpha1.RolloutStrategy{Type: workloadv1alpha1.ServingGroupRollingUpdate, RollingUpdateConfiguration: &workloadv1alpha1.RollingUpdateConfiguration{
		MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromInt32(1)), Partition: ptr.To(intstr.FromInt32(1)),
	}}, ms.Spec.RolloutStrategy)

	require.Len(t, ms.Spec.Template.Roles, 1)
	role := ms.Spec.Template.Roles[0]
	assert.Equal(t, "default", role.Name, "Kthena's role name")
	assert.Equal(t, int32(1), *role.Replicas, "one leader per group")
	assert.Equal(t, int32(3), role.WorkerReplicas, "size 4: the leader and three workers")
	assert.Equal(t, "vllm-leader", role.EntryTemplate.Spec.Containers[0].Name)
	require.NotNil(t, role.WorkerTemplate)
	assert.Equal(t, "vllm-worker", role.WorkerTemplate.Spec.Containers[0].Name)
	lwsAnnotations := map[string]string{"leaderworkerset.sigs.k8s.io/size": "4", "leaderworkerset.sigs.k8s.io/exclusive-topology": "network.berth.sh/leaf"}
	assert.Equal(t, &workloadv1alpha1.Metadata{Labels: map[string]string{"role": "leader"}, Annotations: lwsAnnotations}, role.EntryTemplate.Metadata)
	assert.Equal(t, &workloadv1alpha1.Metadata{Labels: map[string]string{"role": "worker"}, Annotations: lwsAnnotations}, role.WorkerTemplate.Metadata)
	assert.Nil(t, l.Spec.LeaderWorkerTemplate.LeaderTemplate.Annotations, "the LeaderWorkerSet is not changed")
	assert.Empty(t, Ignored(l))
}

// Without a leader template the worker template makes the leader too; size 1 has no
// workers; the restart policies map to the recovery policies; no rollout configuration
// leaves the ModelServing's default.
func TestBuildModelServingVariants(t *testing.T) {
	l := decode(t, `
metadata: {name: one}
spec:
  leaderWorkerTemplate:
    restartPolicy: None
    workerTemplate:
      spec:
        schedulerName: berth-scheduler
        containers: [{name: engine, image: sglang}]
`)
	require.Equal(t, Berths, Claimed(l))
	require.Nil(t, Validate(l))
	ms := BuildModelServing(l)
	assert.Equal(t, int32(1), *ms.Spec.Replicas, "LWS's default")
	role := ms.Spec.Template.Roles[0]
	assert.Zero(t, role.WorkerReplicas)
	assert.Nil(t, role.WorkerTemplate)
	assert.Equal(t, "engine", role.EntryTemplate.Spec.Containers[0].Name)
	assert.Equal(t, workloadv1alpha1.NoneRestartPolicy, ms.Spec.RecoveryPolicy)
	assert.Nil(t, ms.Spec.RolloutStrategy)

	l.Spec.LeaderWorkerTemplate.Size = ptr.To[int32](3)
	l.Spec.LeaderWorkerTemplate.RestartPolicy = lws.RecreateGroupAfterStart
	ms = BuildModelServing(l)
	role = ms.Spec.Template.Roles[0]
	assert.Equal(t, int32(2), role.WorkerReplicas)
	assert.Equal(t, "engine", role.EntryTemplate.Spec.Containers[0].Name)
	assert.Equal(t, "engine", role.WorkerTemplate.Spec.Containers[0].Name, "the same template for leader and workers")
	assert.Equal(t, workloadv1alpha1.ServingGroupRecreate, ms.Spec.RecoveryPolicy)
}

// Which LeaderWorkerSets are Berth's: every template a group uses names berth-scheduler.
// With size 1 a leader template leaves the worker template unused.
func TestClaimed(t *testing.T) {
	tmpl := func(scheduler string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "c"}}}}
	}
	for _, tc := range []struct {
		name           string
		leader, worker string // "-": no leader template
		size           int32
		want           Claim
	}{
		{"worker template only, berth", "-", "berth-scheduler", 4, Berths},
		{"worker template only, default", "-", "", 4, Others},
		{"both berth", "berth-scheduler", "berth-scheduler", 4, Berths},
		{"both default", "", "default-scheduler", 4, Others},
		{"leader berth, worker default", "berth-scheduler", "", 4, Mixed},
		{"leader default, worker berth", "volcano", "berth-scheduler", 2, Mixed},
		{"size 1: the unused worker template does not count", "berth-scheduler", "", 1, Berths},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &lws.LeaderWorkerSet{Spec: lws.LeaderWorkerSetSpec{LeaderWorkerTemplate: lws.LeaderWorkerTemplate{Size: ptr.To(tc.size), WorkerTemplate: tmpl(tc.worker)}}}
			if tc.leader != "-" {
				l.Spec.LeaderWorkerTemplate.LeaderTemplate = ptr.To(tmpl(tc.leader))
			}
			assert.Equal(t, tc.want, Claimed(l))
		})
	}
}

// What LWS's webhook would refuse, and what a ModelServing cannot run, is a problem naming
// the field.
func TestValidate(t *testing.T) {
	base := func() *lws.LeaderWorkerSet { return decode(t, leaderWorkers) }
	for _, tc := range []struct {
		name   string
		change func(l *lws.LeaderWorkerSet)
		reason string
		msg    string
	}{
		{"size 0", func(l *lws.LeaderWorkerSet) { l.Spec.LeaderWorkerTemplate.Size = ptr.To[int32](0) }, ReasonInvalidSpec,
			"spec.leaderWorkerTemplate.size: 0: must be at least 1 (a group is its leader and size − 1 workers)"},
		{"negative replicas", func(l *lws.LeaderWorkerSet) { l.Spec.Replicas = ptr.To[int32](-1) }, ReasonInvalidSpec, "spec.replicas: -1: must be 0 or more"},
		{"workers without containers", func(l *lws.LeaderWorkerSet) { l.Spec.LeaderWorkerTemplate.WorkerTemplate.Spec.Containers = nil }, ReasonInvalidSpec,
			"spec.leaderWorkerTemplate.workerTemplate.spec.containers: required: the workers are made from it"},
		{"leader without containers", func(l *lws.LeaderWorkerSet) { l.Spec.LeaderWorkerTemplate.LeaderTemplate.Spec.Containers = nil }, ReasonInvalidSpec,
			"spec.leaderWorkerTemplate.leaderTemplate.spec.containers: required: the leaders are made from it"},
		{"only an empty worker template", func(l *lws.LeaderWorkerSet) {
			l.Spec.LeaderWorkerTemplate.LeaderTemplate = nil
			l.Spec.LeaderWorkerTemplate.WorkerTemplate.Spec.Containers = nil
		}, ReasonInvalidSpec, "spec.leaderWorkerTemplate.workerTemplate.spec.containers: required: the leaders and workers are made from it"},
		{"mixed schedulers", func(l *lws.LeaderWorkerSet) { l.Spec.LeaderWorkerTemplate.WorkerTemplate.Spec.SchedulerName = "" }, ReasonSchedulerMismatch,
			"spec.leaderWorkerTemplate.leaderTemplate.spec.schedulerName is berth-scheduler, spec.leaderWorkerTemplate.workerTemplate.spec.schedulerName is default-scheduler: " +
				"a group's pods are placed together by one scheduler; name berth-scheduler in both"},
		{"volume claim templates", func(l *lws.LeaderWorkerSet) {
			l.Spec.LeaderWorkerTemplate.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "cache"}}}
		}, ReasonUnsupported, "spec.leaderWorkerTemplate.volumeClaimTemplates: 1 claim templates: Berth runs a LeaderWorkerSet as a ModelServing, which has no per-pod claims; mount existing PersistentVolumeClaims in the pod templates instead"},
		{"a rollout that cannot progress", func(l *lws.LeaderWorkerSet) {
			ru := l.Spec.RolloutStrategy.RollingUpdateConfiguration
			ru.MaxUnavailable, ru.MaxSurge = intstr.FromString("0%"), intstr.FromInt32(0)
		}, ReasonInvalidSpec, "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable: must not be 0 when maxSurge is 0: the rollout could never replace a group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := base()
			tc.change(l)
			p := Validate(l)
			require.NotNil(t, p)
			assert.Equal(t, tc.reason, p.Reason)
			assert.Equal(t, tc.msg, p.Message)
		})
	}
}

// Subgroups and the leader-first startup are not expressed, and said so.
func TestIgnored(t *testing.T) {
	l := decode(t, leaderWorkers)
	l.Spec.LeaderWorkerTemplate.SubGroupPolicy = &lws.SubGroupPolicy{SubGroupSize: ptr.To[int32](2)}
	l.Annotations[lws.SubGroupExclusiveKeyAnnotationKey] = "kubernetes.io/hostname"
	l.Spec.StartupPolicy = lws.LeaderReadyStartupPolicy
	assert.Equal(t, []string{
		"spec.leaderWorkerTemplate.subGroupPolicy (no subgroups: a group is placed whole)",
		"annotation leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology=kubernetes.io/hostname (no subgroups)",
		"spec.startupPolicy LeaderReady (a group's pods are placed and started together)",
	}, Ignored(l))
}

// The LeaderWorkerSet's status follows its ModelServing's: counts, the leaders' selector,
// and LWS's conditions, Available only once the current spec's groups are all ready.
func TestMirrorStatus(t *testing.T) {
	l := decode(t, leaderWorkers)
	l.Generation = 3
	ms := BuildModelServing(l)
	ms.Generation = 5
	cond := func(typ string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: "r"}
	}
	ms.Status = workloadv1alpha1.ModelServingStatus{ObservedGeneration: 5, Replicas: 2, AvailableReplicas: 1, UpdatedReplicas: 2,
		Conditions: []metav1.Condition{cond("Available", "False"), cond("UpdateInProgress", "False")}}

	var st lws.LeaderWorkerSetStatus
	MirrorStatus(l, ms, &st)
	assert.Equal(t, int32(2), st.Replicas)
	assert.Equal(t, int32(1), st.ReadyReplicas)
	assert.Equal(t, int32(2), st.UpdatedReplicas)
	assert.Equal(t, int64(3), st.ObservedGeneration)
	assert.Equal(t, "leaderworkerset.sigs.k8s.io/name=vllm,leaderworkerset.sigs.k8s.io/worker-index=0", st.HPAPodSelector)
	status := func(typ string) (metav1.ConditionStatus, string, string) {
		for _, c := range st.Conditions {
			if c.Type == typ {
				assert.Equal(t, int64(3), c.ObservedGeneration)
				return c.Status, c.Reason, c.Message
			}
		}
		return "", "", ""
	}
	s, reason, msg := status("Available")
	assert.Equal(t, []string{"False", "GroupsProgressing", "1 of 2 groups ready (ModelServing vllm)"}, []string{string(s), reason, msg})
	s, reason, _ = status("Progressing")
	assert.Equal(t, []string{"True", "GroupsProgressing"}, []string{string(s), reason})

	// Both groups ready: Available.
	ms.Status.AvailableReplicas = 2
	ms.Status.Conditions = []metav1.Condition{cond("Available", "True"), cond("UpdateInProgress", "False")}
	MirrorStatus(l, ms, &st)
	s, reason, msg = status("Available")
	assert.Equal(t, []string{"True", "AllGroupsReady", "2 of 2 groups ready (ModelServing vllm)"}, []string{string(s), reason, msg})
	s, _, _ = status("Progressing")
	assert.Equal(t, metav1.ConditionFalse, s)
	s, reason, _ = status("UpdateInProgress")
	assert.Equal(t, []string{"False", "GroupsUpToDate"}, []string{string(s), reason})

	// Scaled to 3 on the LeaderWorkerSet, the ModelServing not yet observed: not Available.
	l.Spec.Replicas = ptr.To[int32](3)
	MirrorStatus(l, ms, &st)
	s, _, msg = status("Available")
	assert.Equal(t, metav1.ConditionFalse, s)
	assert.Equal(t, "ModelServing vllm is being brought in line with the LeaderWorkerSet; 2 of 3 groups ready (ModelServing vllm)", msg)

	// A rolling update in progress.
	l.Spec.Replicas = ptr.To[int32](2)
	ms.Status.Conditions = []metav1.Condition{cond("Available", "True"), cond("UpdateInProgress", "True")}
	MirrorStatus(l, ms, &st)
	s, reason, _ = status("UpdateInProgress")
	assert.Equal(t, []string{"True", "GroupsUpdating"}, []string{string(s), reason})
	s, _, _ = status("Available")
	assert.Equal(t, metav1.ConditionFalse, s)
}
