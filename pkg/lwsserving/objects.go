package lwsserving

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	lws "sigs.k8s.io/lws/api/leaderworkerset/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/workload/plugins"
)

// RoleName is the one role of a LeaderWorkerSet's ModelServing, Kthena's name for it.
const RoleName = "default"

// Claim says whether a LeaderWorkerSet is Berth's to run.
type Claim int

const (
	// Others: no pod template it uses names berth-scheduler; LWS's controller may run it.
	Others Claim = iota
	// Berths: every pod template it uses names berth-scheduler.
	Berths
	// Mixed: one template names berth-scheduler and another does not. A group is one gang
	// placed by one scheduler, so this is a problem reported on the LeaderWorkerSet.
	Mixed
)

// usedTemplates are the pod templates a LeaderWorkerSet's pods are made from, with their
// field paths: the leader's (the worker template when there is no leader template) and, when
// a group has workers, the worker template. With size 1 a leader template leaves the worker
// template unused, as in LWS.
func usedTemplates(l *lws.LeaderWorkerSet) (paths []string, templates []*corev1.PodTemplateSpec) {
	lwt := &l.Spec.LeaderWorkerTemplate
	if lwt.LeaderTemplate != nil {
		paths, templates = append(paths, "spec.leaderWorkerTemplate.leaderTemplate"), append(templates, lwt.LeaderTemplate)
		if ptr.Deref(lwt.Size, 1) == 1 {
			return paths, templates
		}
	}
	return append(paths, "spec.leaderWorkerTemplate.workerTemplate"), append(templates, &lwt.WorkerTemplate)
}

// Claimed says whether the LeaderWorkerSet is Berth's: its used pod templates all name
// berth-scheduler, none does, or some do.
func Claimed(l *lws.LeaderWorkerSet) Claim {
	_, templates := usedTemplates(l)
	n := 0
	for _, t := range templates {
		if t.Spec.SchedulerName == workloadv1alpha1.BerthSchedulerName {
			n++
		}
	}
	switch n {
	case 0:
		return Others
	case len(templates):
		return Berths
	}
	return Mixed
}

// Problem is why a LeaderWorkerSet cannot run: nothing is created for it, and its
// conditions and a warning event say why.
type Problem struct{ Reason, Message string }

func (p *Problem) Error() string { return p.Message }

// Reasons of problems, on the LeaderWorkerSet's Available and Progressing conditions and
// its warning events.
const (
	ReasonSchedulerMismatch = "SchedulerMismatch"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonUnsupported       = "Unsupported"
	ReasonNameConflict      = "NameConflict"
)

// Validate is what LWS's webhook would refuse (there is none without LWS's controller) and
// what a ModelServing cannot express, each naming the field. A template without containers
// is said before the schedulers it names: an empty one names none.
func Validate(l *lws.LeaderWorkerSet) *Problem {
	spec := &l.Spec
	if r := spec.Replicas; r != nil && *r < 0 {
		return &Problem{ReasonInvalidSpec, fmt.Sprintf("spec.replicas: %d: must be 0 or more", *r)}
	}
	size := ptr.Deref(spec.LeaderWorkerTemplate.Size, 1)
	if size < 1 {
		return &Problem{ReasonInvalidSpec, fmt.Sprintf("spec.leaderWorkerTemplate.size: %d: must be at least 1 (a group is its leader and size − 1 workers)", size)}
	}
	paths, templates := usedTemplates(l)
	for i, t := range templates {
		if len(t.Spec.Containers) > 0 {
			continue
		}
		what := "the leaders are"
		switch {
		case strings.HasSuffix(paths[i], "leaderTemplate"):
		case spec.LeaderWorkerTemplate.LeaderTemplate != nil:
			what = "the workers are"
		case size > 1:
			what = "the leaders and workers are"
		}
		return &Problem{ReasonInvalidSpec, fmt.Sprintf("%s.spec.containers: required: %s made from it", paths[i], what)}
	}
	if Claimed(l) == Mixed {
		paths, templates := usedTemplates(l)
		var names []string
		for i, t := range templates {
			name := t.Spec.SchedulerName
			if name == "" {
				name = corev1.DefaultSchedulerName
			}
			names = append(names, fmt.Sprintf("%s.spec.schedulerName is %s", paths[i], name))
		}
		return &Problem{ReasonSchedulerMismatch, strings.Join(names, ", ") +
			": a group's pods are placed together by one scheduler; name " + workloadv1alpha1.BerthSchedulerName + " in both"}
	}
	if n := len(spec.LeaderWorkerTemplate.VolumeClaimTemplates); n > 0 {
		return &Problem{ReasonUnsupported, fmt.Sprintf("spec.leaderWorkerTemplate.volumeClaimTemplates: %d claim templates: Berth runs a LeaderWorkerSet as a ModelServing, which has no per-pod claims; mount existing PersistentVolumeClaims in the pod templates instead", n)}
	}
	if ru := spec.RolloutStrategy.RollingUpdateConfiguration; ru != nil && zero(ru.MaxUnavailable) && zero(ru.MaxSurge) && ptr.Deref(spec.Replicas, 1) > 0 {
		return &Problem{ReasonInvalidSpec, "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable: must not be 0 when maxSurge is 0: the rollout could never replace a group"}
	}
	return nil
}

func zero(v intstr.IntOrString) bool {
	if v.Type == intstr.String {
		return strings.TrimLeft(strings.TrimSuffix(v.StrVal, "%"), "0") == ""
	}
	return v.IntVal == 0
}

// Ignored lists what the LeaderWorkerSet asks for that the ModelServing does not express, for
// a warning event: subgroups and the leader-first startup.
func Ignored(l *lws.LeaderWorkerSet) []string {
	var out []string
	if l.Spec.LeaderWorkerTemplate.SubGroupPolicy != nil {
		out = append(out, "spec.leaderWorkerTemplate.subGroupPolicy (no subgroups: a group is placed whole)")
	}
	if v, ok := l.Annotations[lws.SubGroupExclusiveKeyAnnotationKey]; ok {
		out = append(out, fmt.Sprintf("annotation %s=%s (no subgroups)", lws.SubGroupExclusiveKeyAnnotationKey, v))
	}
	if l.Spec.StartupPolicy == lws.LeaderReadyStartupPolicy {
		out = append(out, "spec.startupPolicy LeaderReady (a group's pods are placed and started together)")
	}
	return out
}

// BuildModelServing is the ModelServing a LeaderWorkerSet runs as, as Kthena's LWS controller
// builds it (its name, one role "default", the leader template as entry, size − 1 workers,
// replicas, lws-standard-labels) plus what Berth adds: berth-scheduler (so every group gets a
// PodGroup and is placed as a gang), LWS's environment variables
// (workload.berth.sh/leaderworkerset-compat), the restart policy and rolling update, and on
// every pod LWS's size annotation and the LeaderWorkerSet's exclusive-topology annotation,
// which lws-standard-labels turns into LWS's exclusive placement.
func BuildModelServing(l *lws.LeaderWorkerSet) *workloadv1alpha1.ModelServing {
	lwt := &l.Spec.LeaderWorkerTemplate
	size := ptr.Deref(lwt.Size, 1)
	entry := lwt.LeaderTemplate
	if entry == nil {
		entry = &lwt.WorkerTemplate
	}
	role := workloadv1alpha1.Role{Name: RoleName, Replicas: ptr.To[int32](1), EntryTemplate: toTemplate(l, entry, size), WorkerReplicas: size - 1}
	if size > 1 {
		role.WorkerTemplate = ptr.To(toTemplate(l, &lwt.WorkerTemplate, size))
	}
	ms := &workloadv1alpha1.ModelServing{
		ObjectMeta: metav1.ObjectMeta{
			Name: l.Name, Namespace: l.Namespace,
			Labels:      map[string]string{lws.SetNameLabelKey: l.Name},
			Annotations: map[string]string{workloadv1alpha1.LeaderWorkerSetCompatAnnotation: "true"},
		},
		Spec: workloadv1alpha1.ModelServingSpec{
			Replicas:       ptr.To(ptr.Deref(l.Spec.Replicas, 1)),
			SchedulerName:  workloadv1alpha1.BerthSchedulerName,
			Plugins:        []workloadv1alpha1.PluginSpec{{Name: plugins.LWSLabelsName, Type: workloadv1alpha1.PluginTypeBuiltIn}},
			RecoveryPolicy: recoveryPolicy(lwt.RestartPolicy),
			Template:       workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{role}},
		},
	}
	if ru := l.Spec.RolloutStrategy.RollingUpdateConfiguration; ru != nil {
		c := &workloadv1alpha1.RollingUpdateConfiguration{MaxUnavailable: ptr.To(ru.MaxUnavailable), MaxSurge: ptr.To(ru.MaxSurge)}
		if p := ptr.Deref(ru.Partition, 0); p > 0 {
			c.Partition = ptr.To(intstr.FromInt32(p))
		}
		ms.Spec.RolloutStrategy = &workloadv1alpha1.RolloutStrategy{Type: workloadv1alpha1.ServingGroupRollingUpdate, RollingUpdateConfiguration: c}
	}
	return ms
}

// toTemplate copies a pod template with LWS's pod annotations added: the group size, and the
// LeaderWorkerSet's exclusive topology, as LWS's controller puts them on its pods.
func toTemplate(l *lws.LeaderWorkerSet, t *corev1.PodTemplateSpec, size int32) workloadv1alpha1.PodTemplateSpec {
	t = t.DeepCopy()
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	t.Annotations[lws.SizeAnnotationKey] = strconv.Itoa(int(size))
	if key := l.Annotations[lws.ExclusiveKeyAnnotationKey]; key != "" {
		t.Annotations[lws.ExclusiveKeyAnnotationKey] = key
	}
	return workloadv1alpha1.PodTemplateSpec{Metadata: &workloadv1alpha1.Metadata{Labels: t.Labels, Annotations: t.Annotations}, Spec: t.Spec}
}

// recoveryPolicy maps LWS's restart policy: a failed pod recreates its whole group
// (RecreateGroupOnPodRestart, the default, and RecreateGroupAfterStart) or only itself
// (None, and the deprecated Default).
func recoveryPolicy(p lws.RestartPolicyType) workloadv1alpha1.RecoveryPolicy {
	switch p {
	case lws.NoneRestartPolicy, lws.DeprecatedDefaultRestartPolicy:
		return workloadv1alpha1.NoneRestartPolicy
	}
	return workloadv1alpha1.ServingGroupRecreate
}

// HPAPodSelector selects a LeaderWorkerSet's leader pods, as LWS's controller writes it in
// status.hpaPodSelector (its scale subresource's selector).
func HPAPodSelector(name string) string {
	return labels.SelectorFromSet(labels.Set{lws.SetNameLabelKey: name, lws.WorkerIndexLabelKey: "0"}).String()
}

// LWS's condition reasons, which Berth writes as LWS's controller does.
const (
	reasonAllGroupsReady    = "AllGroupsReady"
	reasonGroupsProgressing = "GroupsProgressing"
	reasonGroupsUpdating    = "GroupsUpdating"
	reasonUpToDate          = "GroupsUpToDate"
)

// MirrorStatus is the LeaderWorkerSet's status from its ModelServing's: groups that exist,
// are ready and are updated; the leaders' selector; Available when every group asked for is
// ready on the current spec, Progressing otherwise, UpdateInProgress while groups run an old
// revision (each condition's message quotes the ModelServing's).
func MirrorStatus(l *lws.LeaderWorkerSet, ms *workloadv1alpha1.ModelServing, st *lws.LeaderWorkerSetStatus) {
	want := ptr.Deref(l.Spec.Replicas, 1)
	st.Replicas = ms.Status.Replicas
	st.ReadyReplicas = ms.Status.AvailableReplicas
	st.UpdatedReplicas = ms.Status.UpdatedReplicas
	st.HPAPodSelector = HPAPodSelector(l.Name)
	st.ObservedGeneration = l.Generation
	current := ms.Status.ObservedGeneration == ms.Generation && ptr.Deref(ms.Spec.Replicas, 1) == want
	updating := isTrue(ms.Status.Conditions, workloadv1alpha1.ModelServingUpdateInProgress)
	available := current && !updating && ms.Status.AvailableReplicas >= want &&
		isTrue(ms.Status.Conditions, workloadv1alpha1.ModelServingAvailable)
	msg := fmt.Sprintf("%d of %d groups ready (ModelServing %s)", ms.Status.AvailableReplicas, want, ms.Name)
	if !current {
		msg = fmt.Sprintf("ModelServing %s is being brought in line with the LeaderWorkerSet; %s", ms.Name, msg)
	}
	set := func(typ lws.LeaderWorkerSetConditionType, ok bool, yes, no string) {
		s := metav1.ConditionFalse
		reason := no
		if ok {
			s, reason = metav1.ConditionTrue, yes
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: string(typ), Status: s, Reason: reason, Message: msg, ObservedGeneration: l.Generation})
	}
	set(lws.LeaderWorkerSetAvailable, available, reasonAllGroupsReady, reasonGroupsProgressing)
	set(lws.LeaderWorkerSetProgressing, !available, reasonGroupsProgressing, reasonAllGroupsReady)
	set(lws.LeaderWorkerSetUpdateInProgress, updating, reasonGroupsUpdating, reasonUpToDate)
}

// setProblem records a problem: not Available, not Progressing, each with the problem's
// reason and message.
func setProblem(st *lws.LeaderWorkerSetStatus, gen int64, p *Problem) {
	for _, typ := range []lws.LeaderWorkerSetConditionType{lws.LeaderWorkerSetAvailable, lws.LeaderWorkerSetProgressing} {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: string(typ), Status: metav1.ConditionFalse, Reason: p.Reason, Message: p.Message, ObservedGeneration: gen})
	}
	st.ObservedGeneration = gen
}

func isTrue(conds []metav1.Condition, typ string) bool {
	c := meta.FindStatusCondition(conds, typ)
	return c != nil && c.Status == metav1.ConditionTrue
}
