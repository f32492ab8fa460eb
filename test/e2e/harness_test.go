// Package e2e runs the integration scenarios against a real cluster (kind, see docs/kind.md)
// with berth-scheduler and berth-controller installed from manifests/. Pods are real
// containers on real kubelets; a kind node has no GPUs, so the tests give a few workers a
// fake nvidia.com/gpu capacity through the node status subresource, and network-tier labels
// (plus Volcano HyperNodes when that CRD is installed), and take all of it away afterwards.
//
// With BERTH_E2E=1 and KUBECONFIG set they run against that cluster:
//
//	BERTH_E2E=1 KUBECONFIG=$HOME/.kube/config go test ./test/e2e/ -v -timeout 30m
//
// They change nodes of the cluster KUBECONFIG points at (extended-resource capacity, labels):
// use a throwaway cluster. Nodes that report a real nvidia.com/gpu capacity are never touched.
//
// Without BERTH_E2E (as in `make test`), TestMain starts the sandbox with plain workers and
// the same tests run against it through its kubeconfig (main_test.go).
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	volcanobatchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"

	"github.com/berth-sh/berth/internal/sandbox"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
)

const (
	// enableEnv must be "1" for the tests to run; KUBECONFIG must name the cluster.
	enableEnv = "BERTH_E2E"
	// imageEnv overrides the container image of every test pod (default: the pause image
	// the nodes already have, see testImage).
	imageEnv = "BERTH_E2E_IMAGE"

	berthNamespace = "berth-system"
	schedulerName  = workloadv1alpha1.BerthSchedulerName
	// schedulerConfigMap holds the installed KubeSchedulerConfiguration (manifests/scheduler).
	schedulerConfigMap = "berth-scheduler-config"

	gpu = corev1.ResourceName("nvidia.com/gpu")
	// gpusPerNode is the fake capacity a test gives a worker.
	gpusPerNode = 8

	// Network tiers, lowest first: a leaf switch, then a spine.
	leafLabel  = "network.berth.sh/leaf"
	spineLabel = "network.berth.sh/spine"

	// Marks on what the suite creates or changes, so an interrupted run is cleaned up by the
	// next one: namespaces and HyperNodes carry suiteLabel; nodes carry one annotation per
	// kind of change.
	suiteLabel          = "e2e.berth.sh/suite"
	fakeGPUAnnotation   = "e2e.berth.sh/fake-gpus"
	tierLabelAnnotation = "e2e.berth.sh/tier-labels"

	// taskSpecAnnotation is Volcano's pod annotation naming the pod's task (role replica).
	taskSpecAnnotation = volcanobatchv1alpha1.TaskSpecKey

	// fallbackImage is used when no node reports a pause image and BERTH_E2E_IMAGE is unset.
	fallbackImage = "registry.k8s.io/pause:3.10"
)

// Shared by the package's tests, set up on first use.
var (
	setupOnce sync.Once
	setupErr  error
	restCfg   *rest.Config
	kube      kubernetes.Interface
	cl        client.WithWatch
	image     string
	// onSandbox: the cluster is a Berth sandbox (see checkInstalled).
	onSandbox bool
	// startedSandbox: TestMain started the sandbox for this run (as in make test), so the
	// cluster is known and nothing may skip: a test that cannot run there fails.
	startedSandbox bool
)

// scheme is berth-controller's scheme plus Volcano's HyperNode.
func scheme() *runtime.Scheme {
	s := controller.Scheme()
	if err := topologyv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// env is one test's slice of the cluster: its namespace, and the node changes and
// cluster-scoped objects it made, undone after the namespace is gone.
type env struct {
	t   *testing.T
	ctx context.Context
	ns  string

	mu   sync.Mutex
	undo []func(context.Context) error
}

// newEnv skips the test unless the suite is enabled, checks that Berth is installed, and
// creates the test's namespace.
func newEnv(t *testing.T) *env {
	t.Helper()
	// In `make test` TestMain starts the sandbox and sets both variables before any test
	// runs, so neither check can skip there (runOnSandbox fails the run if it cannot).
	if os.Getenv(enableEnv) != "1" {
		t.Fatalf("end-to-end test without %s=1: run it through TestMain (the sandbox) or set %s=1 and KUBECONFIG (docs/kind.md)", enableEnv, enableEnv)
	}
	if os.Getenv("KUBECONFIG") == "" {
		t.Fatalf("end-to-end test: %s=1 but KUBECONFIG is not set; point it at a throwaway cluster with Berth installed (docs/kind.md)", enableEnv)
	}
	setupOnce.Do(func() { setupErr = setup(t) })
	require.NoError(t, setupErr, "end-to-end setup")

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "berth-e2e-", Labels: map[string]string{suiteLabel: "true"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	e := &env{t: t, ctx: ctx, ns: ns.Name}
	t.Logf("namespace %s", e.ns)
	t.Cleanup(e.cleanup)
	e.waitForDefaultServiceAccount()
	return e
}

// waitForDefaultServiceAccount waits until the namespace's "default" ServiceAccount exists
// when the cluster runs a ServiceAccount controller (the "default" namespace has one): the
// ServiceAccount admission plugin rejects pods in a namespace that does not have it yet.
func (e *env) waitForDefaultServiceAccount() {
	e.t.Helper()
	if _, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(e.ctx, "default", metav1.GetOptions{}); err != nil {
		return
	}
	e.eventually("the namespace's default ServiceAccount exists", time.Minute, func() error {
		_, err := kube.CoreV1().ServiceAccounts(e.ns).Get(e.ctx, "default", metav1.GetOptions{})
		return err
	})
}

// setup builds the clients, checks the installation, removes what an interrupted earlier
// run left behind, and picks the pod image.
func setup(t *testing.T) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules() // honours a KUBECONFIG list
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load KUBECONFIG: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	restCfg = cfg
	if kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if cl, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme()}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := checkInstalled(ctx, t); err != nil {
		return err
	}
	if err := removeLeftovers(ctx, t); err != nil {
		return fmt.Errorf("remove what an earlier run left: %w", err)
	}
	image, err = testImage(ctx)
	if err != nil {
		return err
	}
	t.Logf("test pods run %s", image)
	return nil
}

// checkInstalled fails with a hint unless the APIs exist and both Deployments of
// manifests/ are available; in the sandbox (its marker ConfigMap exists) the components run
// in the sandbox's process instead, and were up before it wrote the kubeconfig.
func checkInstalled(ctx context.Context, t *testing.T) error {
	for gv, resource := range map[string]string{
		workloadv1alpha1.SchemeGroupVersion.String(): "modelservings",
		volcanov1beta1.SchemeGroupVersion.String():   "podgroups",
	} {
		if !served(gv, resource) {
			return fmt.Errorf("the cluster does not serve %s %s: install Berth (kubectl apply --server-side -k manifests) and "+
				"Volcano's CRDs (kubectl apply --server-side -f manifests/crds/volcano/), see docs/kind.md", gv, resource)
		}
	}
	marker, err := kube.CoreV1().ConfigMaps(berthNamespace).Get(ctx, sandbox.MarkerConfigMap, metav1.GetOptions{})
	if err == nil {
		t.Logf("a Berth sandbox: %s", marker.Data["components"])
		onSandbox = true
		return nil
	}
	if startedSandbox {
		return fmt.Errorf("the sandbox this suite started has no ConfigMap %s/%s: %w", berthNamespace, sandbox.MarkerConfigMap, err)
	}
	for _, name := range []string{"berth-scheduler", "berth-controller"} {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			d, err := kube.AppsV1().Deployments(berthNamespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, fmt.Errorf("deployment %s/%s not found: install Berth from manifests/ (docs/kind.md)", berthNamespace, name)
			}
			if err != nil {
				last = err.Error()
				return false, nil
			}
			last = fmt.Sprintf("%d/%d replicas available", d.Status.AvailableReplicas, ptr.Deref(d.Spec.Replicas, 1))
			return d.Status.AvailableReplicas > 0, nil
		})
		if err != nil {
			return fmt.Errorf("deployment %s/%s is not available (%s): %w; see `kubectl -n %s describe deploy,pods` and the logs",
				berthNamespace, name, last, err, berthNamespace)
		}
		t.Logf("%s: %s", name, last)
	}
	return nil
}

// served says whether the apiserver serves resource in group/version gv.
func served(gv, resource string) bool {
	list, err := kube.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true
		}
	}
	return false
}

func hyperNodesServed() bool {
	return served(topologyv1alpha1.SchemeGroupVersion.String(), "hypernodes")
}

// removeLeftovers undoes what an interrupted run (a test binary killed by -timeout, ^C)
// could not: fake GPUs and tier labels on nodes, HyperNodes, namespaces.
func removeLeftovers(ctx context.Context, t *testing.T) error {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if _, ok := n.Annotations[fakeGPUAnnotation]; ok {
			t.Logf("removing fake GPUs left on node %s", n.Name)
			if err := removeFakeGPUs(ctx, n.Name); err != nil {
				return err
			}
		}
		if _, ok := n.Annotations[tierLabelAnnotation]; ok {
			t.Logf("removing tier labels left on node %s", n.Name)
			if err := removeTierLabels(ctx, n.Name); err != nil {
				return err
			}
		}
	}
	if hyperNodesServed() {
		if err := cl.DeleteAllOf(ctx, &topologyv1alpha1.HyperNode{}, client.MatchingLabels{suiteLabel: "true"}); err != nil {
			return err
		}
	}
	namespaces, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: suiteLabel + "=true"})
	if err != nil {
		return err
	}
	for _, ns := range namespaces.Items {
		t.Logf("deleting namespace %s left by an earlier run", ns.Name)
		if err := deleteNamespace(ctx, ns.Name); err != nil {
			return err
		}
	}
	return nil
}

// testImage is the image of every test pod: BERTH_E2E_IMAGE, else the pause image every
// schedulable worker already has (kind preloads the one kubeadm uses), so nothing is pulled.
func testImage(ctx context.Context) (string, error) {
	if img := os.Getenv(imageEnv); img != "" {
		return img, nil
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	count := map[string]int{}
	workers := 0
	for _, n := range nodes.Items {
		if !schedulableWorker(&n) {
			continue
		}
		workers++
		seen := map[string]bool{}
		for _, img := range n.Status.Images {
			for _, name := range img.Names {
				if strings.HasPrefix(name, "registry.k8s.io/pause:") && !seen[name] {
					seen[name] = true
					count[name]++
				}
			}
		}
	}
	var candidates []string
	for name, c := range count {
		if c == workers {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) == 0 {
		return fallbackImage, nil
	}
	sort.Strings(candidates)
	return candidates[len(candidates)-1], nil
}

// cleanup deletes the namespace and waits until it is gone (so the next test's capacity is
// free), then undoes the node changes and deletes the cluster-scoped objects.
func (e *env) cleanup() {
	if e.t.Failed() {
		e.dump()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := deleteNamespace(ctx, e.ns); err != nil {
		e.t.Errorf("cleanup: namespace %s: %v", e.ns, err)
	}
	e.mu.Lock()
	undo := e.undo
	e.undo = nil
	e.mu.Unlock()
	for i := len(undo) - 1; i >= 0; i-- {
		if err := undo[i](ctx); err != nil {
			e.t.Errorf("cleanup: %v", err)
		}
	}
}

func (e *env) onCleanup(f func(context.Context) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.undo = append(e.undo, f)
}

func deleteNamespace(ctx context.Context, name string) error {
	err := kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// schedulableWorker: a Ready node without the control-plane role, cordon or NoSchedule taint.
func schedulableWorker(n *corev1.Node) bool {
	if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; cp || n.Spec.Unschedulable {
		return false
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// workers returns n schedulable workers without a real GPU, sorted by name, and skips the
// test when the cluster has fewer. The suite also skips on a cluster with real GPUs: its
// capacity arithmetic assumes the fake GPUs are the only ones. On the sandbox (always when
// the suite started it, as in make test) both fail instead: there a skip would hide a broken
// sandbox behind a passing run.
func (e *env) workers(n int) []string {
	e.t.Helper()
	nodes, err := kube.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	require.NoError(e.t, err)
	var out []string
	for _, node := range nodes.Items {
		_, faked := node.Annotations[fakeGPUAnnotation]
		if q, ok := node.Status.Capacity[gpu]; ok && !q.IsZero() && !faked {
			// Only on a real cluster the user pointed the suite at: the sandbox's workers
			// (make test) have no GPUs until the suite fakes them, so this never skips in CI.
			if onSandbox || startedSandbox {
				e.t.Fatalf("sandbox node %s reports a %s capacity the suite did not fake", node.Name, gpu)
			}
			e.t.Skipf("node %s reports a real %s capacity; this suite fakes GPUs and expects a cluster without them: make test runs it on the sandbox, docs/kind.md on kind", node.Name, gpu)
		}
		if schedulableWorker(&node) {
			out = append(out, node.Name)
		}
	}
	sort.Strings(out)
	if len(out) < n {
		// The sandbox (make test) starts sandboxWorkers plain workers, enough for every test.
		if onSandbox || startedSandbox {
			e.t.Fatalf("the sandbox has %d schedulable workers, the test needs %d", len(out), n)
		}
		e.t.Skipf("needs %d schedulable worker nodes, the cluster has %d (make test runs it on the sandbox with 4, docs/kind.md creates 4)", n, len(out))
	}
	return out[:n]
}

// fakeGPUs gives each node gpusPerNode nvidia.com/gpu, the way one advertises an extended
// resource without a device plugin: capacity (and allocatable, which the kubelet would
// otherwise copy from capacity on its next status sync) through the status subresource.
// The kubelet admits pods against it and leaves it alone; no device is attached.
func (e *env) fakeGPUs(nodes ...string) {
	e.t.Helper()
	for _, name := range nodes {
		e.onCleanup(func(ctx context.Context) error { return removeFakeGPUs(ctx, name) })
		annotate := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, fakeGPUAnnotation, gpusPerNode)
		_, err := kube.CoreV1().Nodes().Patch(e.ctx, name, types.MergePatchType, []byte(annotate), metav1.PatchOptions{})
		require.NoError(e.t, err)
		status := fmt.Sprintf(`{"status":{"capacity":{%q:"%d"},"allocatable":{%q:"%d"}}}`, gpu, gpusPerNode, gpu, gpusPerNode)
		_, err = kube.CoreV1().Nodes().Patch(e.ctx, name, types.StrategicMergePatchType, []byte(status), metav1.PatchOptions{}, "status")
		require.NoError(e.t, err, "patch node %s status", name)
	}
	e.eventually(fmt.Sprintf("nodes %v report %d allocatable %s", nodes, gpusPerNode, gpu), time.Minute, func() error {
		for _, name := range nodes {
			n, err := kube.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if q := n.Status.Allocatable[gpu]; q.Value() != gpusPerNode {
				return fmt.Errorf("node %s: allocatable %s = %s", name, gpu, q.String())
			}
		}
		return nil
	})
}

func removeFakeGPUs(ctx context.Context, name string) error {
	status := fmt.Sprintf(`{"status":{"capacity":{%q:null},"allocatable":{%q:null}}}`, gpu, gpu)
	_, err := kube.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(status), metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove fake GPUs from node %s: %w", name, err)
	}
	unannotate := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, fakeGPUAnnotation)
	_, err = kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(unannotate), metav1.PatchOptions{})
	return client.IgnoreNotFound(err)
}

// labelTiers puts each node under a leaf and all of them under one spine.
func (e *env) labelTiers(leafOf map[string]string, spine string) {
	e.t.Helper()
	for name, leaf := range leafOf {
		e.onCleanup(func(ctx context.Context) error { return removeTierLabels(ctx, name) })
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q,%q:%q},"annotations":{%q:"true"}}}`,
			leafLabel, leaf, spineLabel, spine, tierLabelAnnotation)
		_, err := kube.CoreV1().Nodes().Patch(e.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(e.t, err)
	}
}

func removeTierLabels(ctx context.Context, name string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null,%q:null},"annotations":{%q:null}}}`, leafLabel, spineLabel, tierLabelAnnotation)
	_, err := kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove tier labels from node %s: %w", name, err)
	}
	return nil
}

// createHyperNodes mirrors the tier labels as Volcano HyperNodes: a tier-1 HyperNode per
// leaf with its nodes, and a tier-2 HyperNode for the spine with the leaves.
func (e *env) createHyperNodes(leafOf map[string]string, spine string) {
	e.t.Helper()
	members := map[string][]string{}
	for node, leaf := range leafOf {
		members[leaf] = append(members[leaf], node)
	}
	prefix := e.ns + "-"
	var leaves []string
	for leaf, nodes := range members {
		sort.Strings(nodes)
		hn := &topologyv1alpha1.HyperNode{
			ObjectMeta: metav1.ObjectMeta{Name: prefix + leaf, Labels: map[string]string{suiteLabel: "true"}},
			Spec:       topologyv1alpha1.HyperNodeSpec{Tier: 1},
		}
		for _, n := range nodes {
			hn.Spec.Members = append(hn.Spec.Members, topologyv1alpha1.MemberSpec{
				Type: topologyv1alpha1.MemberTypeNode, Selector: topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: n}},
			})
		}
		e.create(hn)
		leaves = append(leaves, hn.Name)
	}
	sort.Strings(leaves)
	top := &topologyv1alpha1.HyperNode{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + spine, Labels: map[string]string{suiteLabel: "true"}},
		Spec:       topologyv1alpha1.HyperNodeSpec{Tier: 2},
	}
	for _, l := range leaves {
		top.Spec.Members = append(top.Spec.Members, topologyv1alpha1.MemberSpec{
			Type: topologyv1alpha1.MemberTypeHyperNode, Selector: topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: l}},
		})
	}
	e.create(top)
}

// create creates obj; a cluster-scoped object is deleted at cleanup, a namespaced one goes
// with the namespace (its namespace defaults to the test's).
func (e *env) create(obj client.Object) {
	e.t.Helper()
	namespaced, err := cl.IsObjectNamespaced(obj)
	require.NoError(e.t, err)
	if namespaced && obj.GetNamespace() == "" {
		obj.SetNamespace(e.ns)
	}
	require.NoError(e.t, cl.Create(e.ctx, obj), "create %T %s", obj, obj.GetName())
	if !namespaced {
		e.onCleanup(func(ctx context.Context) error { return client.IgnoreNotFound(cl.Delete(ctx, obj)) })
	}
}

// topologyPluginEnabled says whether the installed scheduler profile enables a Berth
// topology plugin (a plugin named Berth…Topology… at any extension point).
func topologyPluginEnabled(ctx context.Context) (bool, string, error) {
	cm, err := kube.CoreV1().ConfigMaps(berthNamespace).Get(ctx, schedulerConfigMap, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			Plugins       map[string]struct {
				Enabled []struct {
					Name string `json:"name"`
				} `json:"enabled"`
			} `json:"plugins"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		return false, "", fmt.Errorf("parse %s/%s: %w", berthNamespace, schedulerConfigMap, err)
	}
	var names []string
	for _, p := range cfg.Profiles {
		if p.SchedulerName != schedulerName {
			continue
		}
		for _, point := range p.Plugins {
			for _, pl := range point.Enabled {
				names = append(names, pl.Name)
				if strings.HasPrefix(pl.Name, "Berth") && strings.Contains(pl.Name, "Topology") {
					return true, pl.Name, nil
				}
			}
		}
	}
	return false, strings.Join(names, ","), nil
}

// eventually polls cond every second until it returns nil, and fails the test with cond's
// last answer when timeout passes.
func (e *env) eventually(what string, timeout time.Duration, cond func() error) {
	e.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, time.Second, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		e.t.Fatalf("timed out after %s waiting until %s: %v", timeout, what, last)
	}
}

// consistently checks cond every second for d and fails the test the first time it errs.
func (e *env) consistently(what string, d time.Duration, cond func() error) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := cond(); err != nil {
			e.t.Fatalf("expected %s to hold for %s: %v", what, d, err)
		}
		time.Sleep(time.Second)
	}
}

// pods lists the namespace's pods matching the labels, terminating ones included.
func (e *env) pods(labels map[string]string) []corev1.Pod {
	e.t.Helper()
	var list corev1.PodList
	require.NoError(e.t, cl.List(e.ctx, &list, client.InNamespace(e.ns), client.MatchingLabels(labels)))
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

func (e *env) podGroup(name string) (*volcanov1beta1.PodGroup, error) {
	pg := &volcanov1beta1.PodGroup{}
	return pg, cl.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: name}, pg)
}

// podReady: Running with the Ready condition true.
func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gpuRequests are a test pod's requests: a little CPU and memory, and n GPUs (limits equal
// requests for the extended resource, as the API requires).
func gpuRequests(n int64) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		Limits:   corev1.ResourceList{},
	}
	if n > 0 {
		r.Requests[gpu] = *resource.NewQuantity(n, resource.DecimalSI)
		r.Limits[gpu] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return r
}

// podSpec is a test pod: one container of the test image holding n GPUs, quick to stop.
func podSpec(gpus int64) corev1.PodSpec {
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []corev1.Container{{
			Name: "engine", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Resources: gpuRequests(gpus),
		}},
	}
}

// dump logs what a failed test needs to explain itself: pods, PodGroups, ModelServings,
// the namespace's events, and the tail of berth-scheduler's and berth-controller's logs.
func (e *env) dump() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t := e.t
	if pods, err := kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			sched := ""
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					sched = fmt.Sprintf("%s %s %s", c.Status, c.Reason, c.Message)
				}
			}
			t.Logf("pod %s node=%q phase=%s deleting=%v scheduled=%s", p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil, sched)
		}
	}
	var pgs volcanov1beta1.PodGroupList
	if err := cl.List(ctx, &pgs, client.InNamespace(e.ns)); err == nil {
		for _, pg := range pgs.Items {
			st, _ := json.Marshal(pg.Status)
			t.Logf("podgroup %s minMember=%d status=%s", pg.Name, pg.Spec.MinMember, st)
		}
	}
	var mss workloadv1alpha1.ModelServingList
	if err := cl.List(ctx, &mss, client.InNamespace(e.ns)); err == nil {
		for _, ms := range mss.Items {
			st, _ := json.Marshal(ms.Status)
			t.Logf("modelserving %s generation=%d status=%s", ms.Name, ms.Generation, st)
		}
	}
	if events, err := kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		items := events.Items
		sort.Slice(items, func(i, j int) bool { return eventTime(&items[i]).Before(eventTime(&items[j])) })
		if len(items) > 60 {
			items = items[len(items)-60:]
		}
		for _, ev := range items {
			t.Logf("event %s %s/%s %s: %s", ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
		}
	}
	berthPods, err := kube.CoreV1().Pods(berthNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=berth"})
	if err != nil {
		return
	}
	for _, p := range berthPods.Items {
		for _, c := range p.Spec.Containers {
			logs, err := kube.CoreV1().Pods(berthNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: ptr.To[int64](40)}).Stream(ctx)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(logs)
			_ = logs.Close()
			t.Logf("--- logs of %s/%s (last 40 lines) ---\n%s", p.Name, c.Name, b)
		}
	}
}

func eventTime(ev *corev1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}
