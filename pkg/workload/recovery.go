package workload

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// unit is a role replica: an entry pod and its workers, which start (and restart) together.
type unit struct {
	role    *workloadv1alpha1.Role
	replica int
	names   []string      // expected pod names, entry first
	present []*corev1.Pod // pods that exist and are not terminating
	dying   []*corev1.Pod // pods being deleted
	// pending counts the pods this controller created that its cache does not show yet
	// (createdPods): they exist, so they are not lost.
	pending int
}

func (u *unit) terminating() bool { return len(u.dying) > 0 }

// ready says whether every pod of the role replica exists and is Ready.
func (u *unit) ready() bool {
	if len(u.dying) > 0 || len(u.present) != len(u.names) {
		return false
	}
	for _, p := range u.present {
		if !podReady(p) {
			return false
		}
	}
	return true
}

// outdated says whether a pod of the role replica was built from another template of its
// role (hashes: RoleTemplateHash by role).
func (u *unit) outdated(hashes map[string]string, revision string) bool {
	for _, p := range u.present {
		if !onCurrentRoleTemplate(p, hashes, revision) {
			return true
		}
	}
	return false
}

// revision is the revision the role replica's live pods were created under ("" if none).
func (u *unit) revision() string {
	if len(u.present) == 0 {
		return ""
	}
	return u.present[0].Labels[workloadv1alpha1.RevisionLabel]
}

// groupUnits lists a group's role replicas with what exists of each.
func groupUnits(ms *workloadv1alpha1.ModelServing, g *servingGroup) []*unit {
	var out []*unit
	for ri := range ms.Spec.Template.Roles {
		role := &ms.Spec.Template.Roles[ri]
		for j := 0; j < roleReplicas(role); j++ {
			u := &unit{role: role, replica: j}
			for k := 0; k <= int(role.WorkerReplicas); k++ {
				name := PodName(ms.Name, g.index, role.Name, j, k)
				u.names = append(u.names, name)
				if p, ok := g.pods[name]; ok {
					if p.DeletionTimestamp != nil {
						u.dying = append(u.dying, p)
					} else {
						u.present = append(u.present, p)
					}
				}
			}
			out = append(out, u)
		}
	}
	return out
}

// podsOutside lists the group's live pods that belong to no expected role replica.
func podsOutside(g *servingGroup, units []*unit) []*corev1.Pod {
	expected := map[string]bool{}
	for _, u := range units {
		for _, n := range u.names {
			expected[n] = true
		}
	}
	var out []*corev1.Pod
	for name, p := range g.pods {
		if !expected[name] && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// deletion is one recovery decision: pods to delete, and the event that explains it.
type deletion struct {
	reason, message string
	pods            []*corev1.Pod
}

// recoveryPlan is what recovery does to one group in this pass.
type recoveryPlan struct {
	wait      time.Duration // a failure is inside restartGracePeriodSeconds: look again then
	deletions []deletion
}

// planRecovery applies the ModelServing's recoveryPolicy to a group:
//   - None: a failed pod is replaced, alone; a restarted container is left to the kubelet.
//   - RoleRecreate: a failed, restarted or lost pod takes its whole role replica (entry and
//     workers) down, so the replica starts again together.
//   - ServingGroupRecreate: it takes the whole group down.
//
// A lost pod (deleted, or gone with its node) counts as soon as it is seen missing; a failed
// pod or restarted container counts once restartGracePeriodSeconds have passed since it failed.
func planRecovery(ms *workloadv1alpha1.ModelServing, g *servingGroup, units []*unit, now time.Time) recoveryPlan {
	policy := ms.Spec.RecoveryPolicy
	if policy == "" {
		policy = workloadv1alpha1.RoleRecreate
	}
	grace := time.Duration(0)
	if s := ms.Spec.Template.RestartGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * time.Second
	}
	var plan recoveryPlan
	var groupReasons []string
	for _, u := range units {
		if u.terminating() {
			continue
		}
		var reasons []string
		var failedPods []*corev1.Pod
		for _, p := range u.present {
			failed := p.Status.Phase == corev1.PodFailed
			restarted := restartCount(p) > 0
			if !failed && !(restarted && policy != workloadv1alpha1.NoneRestartPolicy) {
				continue
			}
			if at := failureTime(p); !at.IsZero() && now.Before(at.Add(grace)) {
				if w := at.Add(grace).Sub(now); plan.wait == 0 || w < plan.wait {
					plan.wait = w
				}
				continue
			}
			if failed {
				reasons = append(reasons, fmt.Sprintf("pod %s failed", p.Name))
				failedPods = append(failedPods, p)
			} else {
				reasons = append(reasons, fmt.Sprintf("a container of pod %s restarted", p.Name))
			}
		}
		// Pods lost from a replica that still has others: the survivors restart with them.
		if len(u.present) > 0 && len(u.present)+u.pending < len(u.names) && policy != workloadv1alpha1.NoneRestartPolicy {
			reasons = append(reasons, fmt.Sprintf("%d of %d pods of %s are gone", len(u.names)-len(u.present), len(u.names), workloadv1alpha1.RoleReplicaName(u.role.Name, u.replica)))
		}
		if len(reasons) == 0 {
			continue
		}
		switch policy {
		case workloadv1alpha1.NoneRestartPolicy:
			plan.deletions = append(plan.deletions, deletion{reason: ReasonReplacePod,
				message: fmt.Sprintf("replacing in %s: %s", workloadv1alpha1.ServingGroupName(ms.Name, g.index), strings.Join(reasons, "; ")), pods: failedPods})
		case workloadv1alpha1.ServingGroupRecreate:
			groupReasons = append(groupReasons, reasons...)
		default:
			plan.deletions = append(plan.deletions, deletion{reason: ReasonRecreateRole,
				message: fmt.Sprintf("recreating role replica %s of %s: %s", workloadv1alpha1.RoleReplicaName(u.role.Name, u.replica), workloadv1alpha1.ServingGroupName(ms.Name, g.index), strings.Join(reasons, "; ")),
				pods:    u.present})
		}
	}
	if len(groupReasons) > 0 {
		var all []*corev1.Pod
		for _, u := range units {
			all = append(all, u.present...)
		}
		plan.deletions = []deletion{{reason: ReasonRecreateGroup,
			message: fmt.Sprintf("recreating ServingGroup %s: %s", workloadv1alpha1.ServingGroupName(ms.Name, g.index), strings.Join(groupReasons, "; ")), pods: all}}
	}
	if len(plan.deletions) > 0 {
		plan.wait = 0
	}
	return plan
}

func restartCount(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.InitContainerStatuses {
		n += c.RestartCount
	}
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// failureTime is when the pod last failed: its latest container termination, else the
// time it stopped being Ready.
func failureTime(p *corev1.Pod) time.Time {
	var at time.Time
	for _, c := range p.Status.ContainerStatuses {
		if t := c.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(at) {
			at = t.FinishedAt.Time
		}
		if t := c.State.Terminated; t != nil && t.FinishedAt.After(at) {
			at = t.FinishedAt.Time
		}
	}
	if at.IsZero() {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
				at = c.LastTransitionTime.Time
			}
		}
	}
	return at
}
