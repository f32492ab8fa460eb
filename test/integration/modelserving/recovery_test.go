package modelserving

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Each recovery policy after a pod failure, a container restart and a node loss. The
// trigger hits the worker of decode-0; the test checks which pods were recreated (new UID)
// and that the ModelServing is Available again.
func TestRecoveryPolicies(t *testing.T) {
	type trigger string
	const (
		podFailure       trigger = "pod failure"
		containerRestart trigger = "container restart"
		nodeLoss         trigger = "node loss"
	)
	for _, policy := range []workloadv1alpha1.RecoveryPolicy{workloadv1alpha1.RoleRecreate, workloadv1alpha1.ServingGroupRecreate, workloadv1alpha1.NoneRestartPolicy} {
		for _, what := range []trigger{podFailure, containerRestart, nodeLoss} {
			t.Run(fmt.Sprintf("%s after %s", policy, what), func(t *testing.T) {
				w := newWorld(t, 3)
				name := strings.ToLower(fmt.Sprintf("r%d", nsCount.Load()))
				manifest := strings.Replace(pd(name, "berth-scheduler", 1), "  replicas: 1\n", fmt.Sprintf("  replicas: 1\n  recoveryPolicy: %s\n", policy), 1)
				w.apply(manifest)
				w.eventually("the group is available", 60*time.Second, w.availableWith(name, 1))
				before := w.uids(name)
				target := name + "-0-decode-0-1"

				// Which pods the trigger hits directly.
				hit := map[string]bool{target: true}
				switch what {
				case podFailure:
					require.NoError(t, kubelet.FailPod(w.ctx, w.ns, target))
				case containerRestart:
					require.NoError(t, kubelet.RestartContainer(w.ctx, w.ns, target))
				case nodeLoss:
					node := w.podNode(target)
					for _, p := range w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: name}) {
						if p.Spec.NodeName == node {
							hit[p.Name] = true
						}
					}
					w.addNode("spare") // room for what was on the lost node
					require.NoError(t, kubelet.LoseNode(w.ctx, node))
				}

				want := expectRecreated(policy, what == containerRestart, hit, before)
				w.eventually("the recovery finishes and the group is available again", 60*time.Second, func() bool {
					if !w.availableWith(name, 1)() {
						return false
					}
					after := w.uids(name)
					return len(recreated(before, after)) == len(want)
				})
				if len(want) == 0 { // None after a container restart: the kubelet's business alone
					w.seenAndLeftAlone(name, target, before)
				}
				assert.Equal(t, want, recreated(before, w.uids(name)), "recreated pods")
			})
		}
	}
}

// seenAndLeftAlone proves the controller looked at the pod hit by the trigger and chose to
// recreate nothing. Nothing changing proves nothing alone: the wait for "available, nothing
// recreated" holds before the controller has even seen the trigger. So the test shows the
// restart as a kubelet does, the new container not ready until its probe passes, and waits
// until the ModelServing's status counts the group unavailable. Only a reconcile pass that
// read the pod not ready, and so with its restart count, writes that status. A pass that
// recreates deletes before it writes status, so a replacement would already be visible.
// Then the pod is ready again and the group must come back with every pod it had.
func (w *world) seenAndLeftAlone(ms, pod string, before map[string]types.UID) {
	w.t.Helper()
	w.setReady(pod, false)
	w.eventually("the status counts the group with the restarted pod unavailable", 60*time.Second, func() bool {
		if len(recreated(before, w.uids(ms))) > 0 {
			return true // the controller acted; the check below says on what
		}
		st := w.get(ms).Status
		cond := findCondition(st.Conditions, workloadv1alpha1.ModelServingAvailable)
		return st.AvailableReplicas == 0 && cond != nil && cond.Status == "False"
	})
	require.Empty(w.t, recreated(before, w.uids(ms)), "pods recreated once the controller had seen the restarted pod")
	w.setReady(pod, true)
	w.eventually("the group is available again", 60*time.Second, w.availableWith(ms, 1))
}

// expectRecreated: None replaces only the pods hit (and nothing after a restart);
// RoleRecreate replaces every pod of a hit role replica; ServingGroupRecreate replaces all.
func expectRecreated(policy workloadv1alpha1.RecoveryPolicy, restartOnly bool, hit map[string]bool, pods map[string]types.UID) []string {
	var out []string
	for name := range pods {
		switch policy {
		case workloadv1alpha1.ServingGroupRecreate:
			out = append(out, name)
		case workloadv1alpha1.RoleRecreate:
			for h := range hit {
				if replicaOf(h) == replicaOf(name) {
					out = append(out, name)
					break
				}
			}
		default:
			if hit[name] && !restartOnly {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// replicaOf strips the pod index: "x-0-decode-1-1" -> "x-0-decode-1".
func replicaOf(pod string) string { return pod[:strings.LastIndex(pod, "-")] }

func recreated(before, after map[string]types.UID) []string {
	var out []string
	for name, uid := range before {
		if after[name] != uid {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (w *world) uids(ms string) map[string]types.UID {
	out := map[string]types.UID{}
	for _, p := range w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: ms}) {
		if p.DeletionTimestamp == nil {
			out[p.Name] = p.UID
		}
	}
	return out
}

func (w *world) podNode(name string) string {
	w.t.Helper()
	p, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, name, metav1GetOptions)
	require.NoError(w.t, err)
	return p.Spec.NodeName
}
