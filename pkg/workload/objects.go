// Package workload holds the ModelServing controller: it turns a ModelServing into
// ServingGroups of pods, headless Services and one Volcano PodGroup per group, following the
// controller↔scheduler contract of DESIGN.md. It never picks a node.
package workload

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	volcanobatchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Annotations that tie a pod to its Volcano PodGroup and task (Volcano's own keys).
const (
	groupNameAnnotation = volcanov1beta1.KubeGroupNameAnnotationKey
	taskSpecAnnotation  = volcanobatchv1alpha1.TaskSpecKey
)

// volcanoScheduler is Volcano's scheduler name; it and berth-scheduler
// (workloadv1alpha1.BerthSchedulerName) read Volcano PodGroups.
const volcanoScheduler = "volcano"

// PodName is pod k (0 = entry, 1..workers) of role replica j of role r in group i.
func PodName(ms string, i int, role string, j, k int) string {
	return fmt.Sprintf("%s-%d-%s-%d-%d", ms, i, role, j, k)
}

// ServiceName is the headless Service of a role replica with workers; its entry pod is
// reachable as <entry pod>.<service>.<namespace>.svc.
func ServiceName(ms string, i int, role string, j int) string {
	return fmt.Sprintf("%s-%d-%s-%d", ms, i, role, j)
}

// GroupIndex parses i out of a group name "<ms>-<i>".
func GroupIndex(ms, group string) (int, bool) {
	rest, ok := strings.CutPrefix(group, ms+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0
}

// needsPodGroup says whether a group gets a Volcano PodGroup: when a gang-aware scheduler
// places it and the group asks for a gang, a topology, or has a role with workers, or when
// the ModelServing spreads its groups (the scheduler counts groups by their PodGroup).
func needsPodGroup(ms *workloadv1alpha1.ModelServing) bool {
	if ms.Spec.SchedulerName != workloadv1alpha1.BerthSchedulerName && ms.Spec.SchedulerName != volcanoScheduler {
		return false
	}
	t := ms.Spec.Template
	if t.GangPolicy != nil || t.NetworkTopology != nil || len(ms.Spec.TopologySpreadConstraints) > 0 {
		return true
	}
	for _, r := range t.Roles {
		if r.WorkerReplicas > 0 {
			return true
		}
	}
	return false
}

func roleReplicas(r *workloadv1alpha1.Role) int {
	if r.Replicas == nil {
		return 1
	}
	return int(*r.Replicas)
}

// minRoleReplicas is how many replicas of a role the gang's minimum counts: the gang
// policy's value, or all of them when the role is not in the map.
func minRoleReplicas(ms *workloadv1alpha1.ModelServing, r *workloadv1alpha1.Role) int {
	if gp := ms.Spec.Template.GangPolicy; gp != nil {
		if m, ok := gp.MinRoleReplicas[r.Name]; ok {
			return min(int(m), roleReplicas(r))
		}
	}
	return roleReplicas(r)
}

// BuildPodGroup is the Volcano PodGroup of group i, exactly as DESIGN.md's contract says:
// minTaskMember per role replica in the minimum, minMember their sum, minResources the
// summed requests of those pods, the group's networkTopology (the spec's flat form or Kthena
// 1.0's groupPolicy), and one subGroupPolicy per role with workers so a role replica is
// placed whole. With Kthena 1.0's rolePolicy every role has a subGroupPolicy entry, carrying
// the policy as its networkTopology, as Kthena's controller writes it.
func BuildPodGroup(ms *workloadv1alpha1.ModelServing, i int) *volcanov1beta1.PodGroup {
	name := workloadv1alpha1.ServingGroupName(ms.Name, i)
	pg := &volcanov1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ms.Namespace, Name: name,
			Labels: map[string]string{
				workloadv1alpha1.ModelServingNameLabel: ms.Name,
				workloadv1alpha1.GroupNameLabel:        name,
			},
			OwnerReferences: []metav1.OwnerReference{ownerRef(ms)},
		},
	}
	pg.Spec.MinTaskMember = map[string]int32{}
	minResources := corev1.ResourceList{}
	groupTopology, roleTopology := ms.Spec.Template.NetworkTopology.Policies()
	for ri := range ms.Spec.Template.Roles {
		r := &ms.Spec.Template.Roles[ri]
		size := int32(1 + r.WorkerReplicas)
		for j := 0; j < minRoleReplicas(ms, r); j++ {
			pg.Spec.MinTaskMember[workloadv1alpha1.RoleReplicaName(r.Name, j)] = size
			pg.Spec.MinMember += size
			addRequests(minResources, &r.EntryTemplate.Spec, 1)
			if r.WorkerTemplate != nil {
				addRequests(minResources, &r.WorkerTemplate.Spec, int(r.WorkerReplicas))
			}
		}
		if r.WorkerReplicas > 0 || roleTopology != nil {
			pg.Spec.SubGroupPolicy = append(pg.Spec.SubGroupPolicy, volcanov1beta1.SubGroupPolicySpec{
				Name:            r.Name,
				NetworkTopology: roleTopology.DeepCopy(),
				SubGroupSize:    ptr.To(size),
				MinSubGroups:    ptr.To[int32](0),
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
					workloadv1alpha1.GroupNameLabel: name,
					workloadv1alpha1.RoleLabel:      r.Name,
				}},
				MatchLabelKeys: []string{workloadv1alpha1.RoleIDLabel},
			})
		}
	}
	if len(minResources) > 0 {
		pg.Spec.MinResources = &minResources
	}
	pg.Spec.NetworkTopology = groupTopology.DeepCopy()
	return pg
}

// addRequests adds n times the pod's container requests (the larger of the sum of app
// containers and any init container, as the scheduler counts them).
func addRequests(total corev1.ResourceList, spec *corev1.PodSpec, n int) {
	if n == 0 {
		return
	}
	pod := corev1.ResourceList{}
	for _, c := range spec.Containers {
		for name, q := range c.Resources.Requests {
			sum := pod[name]
			sum.Add(q)
			pod[name] = sum
		}
	}
	for _, c := range spec.InitContainers {
		for name, q := range c.Resources.Requests {
			if cur, ok := pod[name]; !ok || q.Cmp(cur) > 0 {
				pod[name] = q.DeepCopy()
			}
		}
	}
	for name, q := range pod {
		sum := total[name]
		for k := 0; k < n; k++ {
			sum.Add(q)
		}
		total[name] = sum
	}
}

func ownerRef(ms *workloadv1alpha1.ModelServing) metav1.OwnerReference {
	return *metav1.NewControllerRef(ms, workloadv1alpha1.SchemeGroupVersion.WithKind("ModelServing"))
}

// BuildPod is pod k of role replica j of role r in group i, from the role's entry (k=0) or
// worker template, with the contract's labels, annotations and env, owned by the
// ModelServing and addressed to its scheduler.
func BuildPod(ms *workloadv1alpha1.ModelServing, revision string, i int, r *workloadv1alpha1.Role, j, k int) *corev1.Pod {
	tmpl := &r.EntryTemplate
	if k > 0 && r.WorkerTemplate != nil {
		tmpl = r.WorkerTemplate
	}
	group := workloadv1alpha1.ServingGroupName(ms.Name, i)
	task := workloadv1alpha1.RoleReplicaName(r.Name, j)
	name := PodName(ms.Name, i, r.Name, j, k)

	labels := map[string]string{}
	annotations := map[string]string{}
	if tmpl.Metadata != nil {
		for key, v := range tmpl.Metadata.Labels {
			labels[key] = v
		}
		for key, v := range tmpl.Metadata.Annotations {
			annotations[key] = v
		}
	}
	labels[workloadv1alpha1.ModelServingNameLabel] = ms.Name
	labels[workloadv1alpha1.GroupNameLabel] = group
	labels[workloadv1alpha1.RoleLabel] = r.Name
	labels[workloadv1alpha1.RoleIDLabel] = task
	labels[workloadv1alpha1.RevisionLabel] = revision
	labels[workloadv1alpha1.RoleTemplateHashLabel] = RoleTemplateHash(r)
	if k == 0 {
		labels[workloadv1alpha1.EntryLabel] = "true"
	}
	if needsPodGroup(ms) {
		annotations[groupNameAnnotation] = group
		annotations[taskSpecAnnotation] = task
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ms.Namespace, Name: name, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{ownerRef(ms)},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	if ms.Spec.SchedulerName != "" {
		pod.Spec.SchedulerName = ms.Spec.SchedulerName
	}
	entry := PodName(ms.Name, i, r.Name, j, 0)
	entryAddress := entry
	if r.WorkerReplicas > 0 {
		svc := ServiceName(ms.Name, i, r.Name, j)
		// Hostname + subdomain give the pod the stable DNS name the workers dial.
		if len(name) <= 63 {
			pod.Spec.Hostname = name
		}
		pod.Spec.Subdomain = svc
		entryAddress = fmt.Sprintf("%s.%s.%s.svc", entry, svc, ms.Namespace)
	}
	env := []corev1.EnvVar{
		{Name: workloadv1alpha1.GroupSizeEnv, Value: strconv.Itoa(int(1 + r.WorkerReplicas))},
		{Name: workloadv1alpha1.EntryAddressEnv, Value: entryAddress},
		{Name: workloadv1alpha1.WorkerIndexEnv, Value: strconv.Itoa(k)},
	}
	var lws []corev1.EnvVar
	if ms.Annotations[workloadv1alpha1.LeaderWorkerSetCompatAnnotation] == "true" {
		pod.Labels[workloadv1alpha1.LWSWorkerIndexLabel] = strconv.Itoa(k)
		pod.Labels[workloadv1alpha1.LWSGroupIndexLabel] = strconv.Itoa(i)
		lws = []corev1.EnvVar{
			{Name: "LWS_LEADER_ADDRESS", Value: entryAddress},
			{Name: "LWS_GROUP_SIZE", Value: strconv.Itoa(int(1 + r.WorkerReplicas))},
			{Name: "LWS_WORKER_INDEX", Value: strconv.Itoa(k)},
		}
	}
	for c := range pod.Spec.Containers {
		pod.Spec.Containers[c].Env = appendUnset(append(pod.Spec.Containers[c].Env, env...), lws)
	}
	for c := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[c].Env = appendUnset(append(pod.Spec.InitContainers[c].Env, env...), lws)
	}
	return pod
}

// appendUnset adds the LWS variables a container does not define itself (an LWS manifest
// defines LWS_WORKER_INDEX from the worker-index label, which holds the same value).
func appendUnset(have, add []corev1.EnvVar) []corev1.EnvVar {
	for _, e := range add {
		if !slices.ContainsFunc(have, func(h corev1.EnvVar) bool { return h.Name == e.Name }) {
			have = append(have, e)
		}
	}
	return have
}

// BuildService is the headless Service of a role replica with workers.
func BuildService(ms *workloadv1alpha1.ModelServing, i int, r *workloadv1alpha1.Role, j int) *corev1.Service {
	name := ServiceName(ms.Name, i, r.Name, j)
	group := workloadv1alpha1.ServingGroupName(ms.Name, i)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ms.Namespace, Name: name,
			Labels: map[string]string{
				workloadv1alpha1.ModelServingNameLabel: ms.Name,
				workloadv1alpha1.GroupNameLabel:        group,
				workloadv1alpha1.RoleLabel:             r.Name,
				workloadv1alpha1.RoleIDLabel:           workloadv1alpha1.RoleReplicaName(r.Name, j),
			},
			OwnerReferences: []metav1.OwnerReference{ownerRef(ms)},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector: map[string]string{
				workloadv1alpha1.GroupNameLabel: group,
				workloadv1alpha1.RoleIDLabel:    workloadv1alpha1.RoleReplicaName(r.Name, j),
			},
			// Workers must resolve the entry before it is Ready: they start together.
			PublishNotReadyAddresses: true,
		},
	}
}
