package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// A gang of 3 pods of 8 GPUs on 2 nodes of 8 GPUs binds nothing, and its PodGroup says why;
// a third GPU node makes the whole gang bind and run. The gang is what berth-controller
// writes for a ServingGroup (DESIGN.md's contract), written by hand: a Volcano PodGroup with
// minTaskMember per role replica and pods that name it and berth-scheduler.
func TestGangBindsAllOrNothing(t *testing.T) {
	e := newEnv(t)
	nodes := e.workers(3)
	e.fakeGPUs(nodes[0], nodes[1])
	e.createGang("gang", "server", 3, gpusPerNode)

	e.eventually("the PodGroup explains why the gang is pending", 3*time.Minute, func() error {
		pg, err := e.podGroup("gang")
		if err != nil {
			return err
		}
		c := condition(pg, volcanov1beta1.PodGroupUnschedulableType)
		if c == nil || c.Status != corev1.ConditionTrue {
			return fmt.Errorf("no Unschedulable condition yet: %+v", pg.Status.Conditions)
		}
		if c.Reason != volcanov1beta1.NotEnoughResourcesReason || !strings.HasPrefix(c.Message, "server needs 3 complete replicas, 2 fit") ||
			!strings.Contains(c.Message, "free "+string(gpu)) {
			return fmt.Errorf("condition %s %q, want NotEnoughResources \"server needs 3 complete replicas, 2 fit: …free %s\"", c.Reason, c.Message, gpu)
		}
		return nil
	})
	e.consistently("no pod of the gang binds", 20*time.Second, func() error {
		if n := e.bound("gang"); n != 0 {
			return fmt.Errorf("%d pods of the gang are bound", n)
		}
		return nil
	})
	pg, err := e.podGroup("gang")
	require.NoError(t, err)
	require.Equal(t, volcanov1beta1.PodGroupPending, pg.Status.Phase)

	e.fakeGPUs(nodes[2])
	e.eventually("the whole gang binds and runs, one pod per GPU node", 3*time.Minute, func() error {
		pods := e.pods(map[string]string{workloadv1alpha1.GroupNameLabel: "gang"})
		used := map[string]bool{}
		for _, p := range pods {
			if !podReady(&p) {
				return fmt.Errorf("pod %s on %q is %s, not ready", p.Name, p.Spec.NodeName, p.Status.Phase)
			}
			used[p.Spec.NodeName] = true
		}
		if len(pods) != 3 || len(used) != 3 {
			return fmt.Errorf("%d pods on %d nodes, want 3 on 3", len(pods), len(used))
		}
		return nil
	})
	e.eventually("the PodGroup reports Running with its pods", 2*time.Minute, func() error {
		pg, err := e.podGroup("gang")
		if err != nil {
			return err
		}
		if c := condition(pg, volcanov1beta1.PodGroupUnschedulableType); pg.Status.Phase != volcanov1beta1.PodGroupRunning ||
			pg.Status.Running != 3 || (c != nil && c.Status == corev1.ConditionTrue) {
			return fmt.Errorf("phase=%s running=%d conditions=%+v", pg.Status.Phase, pg.Status.Running, pg.Status.Conditions)
		}
		return nil
	})
}

// createGang writes one gang: a PodGroup whose minimum is every replica of the role, and
// one pod per replica (no workers), each holding gpus GPUs.
func (e *env) createGang(group, role string, replicas int, gpus int64) {
	e.t.Helper()
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: group}}
	pg.Spec.MinMember = int32(replicas)
	pg.Spec.MinTaskMember = map[string]int32{}
	minResources := corev1.ResourceList{}
	for j := 0; j < replicas; j++ {
		pg.Spec.MinTaskMember[fmt.Sprintf("%s-%d", role, j)] = 1
		for name, q := range gpuRequests(gpus).Requests {
			sum := minResources[name]
			sum.Add(q)
			minResources[name] = sum
		}
	}
	minResources[gpu] = *resource.NewQuantity(int64(replicas)*gpus, resource.DecimalSI)
	pg.Spec.MinResources = &minResources
	e.create(pg)

	for j := 0; j < replicas; j++ {
		task := fmt.Sprintf("%s-%d", role, j)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%s-0", group, task),
				Labels: map[string]string{
					workloadv1alpha1.GroupNameLabel: group, workloadv1alpha1.RoleLabel: role,
					workloadv1alpha1.RoleIDLabel: task, workloadv1alpha1.EntryLabel: "true",
				},
				Annotations: map[string]string{volcanov1beta1.KubeGroupNameAnnotationKey: group, taskSpecAnnotation: task},
			},
			Spec: podSpec(gpus),
		}
		pod.Spec.SchedulerName = schedulerName
		e.create(pod)
	}
}

// bound counts the group's pods that have a node.
func (e *env) bound(group string) int {
	n := 0
	for _, p := range e.pods(map[string]string{workloadv1alpha1.GroupNameLabel: group}) {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

func condition(pg *volcanov1beta1.PodGroup, typ volcanov1beta1.PodGroupConditionType) *volcanov1beta1.PodGroupCondition {
	for i := range pg.Status.Conditions {
		if pg.Status.Conditions[i].Type == typ {
			return &pg.Status.Conditions[i]
		}
	}
	return nil
}
