package controlplane_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The control plane runs kube-controller-manager's garbage collector, namespace, Deployment,
// ReplicaSet, EndpointSlice and disruption controllers. These tests show each doing what a user of a cluster expects.

// gone waits until get reports NotFound, failing the test after a minute.
func gone(t *testing.T, what string, get func(ctx context.Context) error) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := get(ctx)
		return apierrors.IsNotFound(err), nil
	})
	require.NoError(t, err, "%s is still there", what)
}

func newNamespace(t *testing.T, kube kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return ns.Name
}

// A dependent of a built-in kind and one of a custom resource go when their owner goes,
// including a custom resource whose CRD the collector learnt about from discovery.
func TestGarbageCollectorHonoursOwnerReferences(t *testing.T) {
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	dyn := dynamic.NewForConfigOrDie(cp.RESTConfig())
	ns := newNamespace(t, kube, "gc-")

	owner, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}
	_, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: []metav1.OwnerReference{ref}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	widgets := schema.GroupVersionResource{Group: "test.berth.dev", Version: "v1", Resource: "widgets"}
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("test.berth.dev/v1")
	w.SetKind("Widget")
	w.SetName("owned-widget")
	w.SetOwnerReferences([]metav1.OwnerReference{ref})
	_, err = dyn.Resource(widgets).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
	require.NoError(t, err)
	// An object with no owner stays: the collector deletes only what lost its owner.
	_, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bystander"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	require.NoError(t, kube.CoreV1().ConfigMaps(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{}))
	gone(t, "the dependent ConfigMap", func(ctx context.Context) error {
		_, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "dependent", metav1.GetOptions{})
		return err
	})
	gone(t, "the dependent Widget", func(ctx context.Context) error {
		_, err := dyn.Resource(widgets).Namespace(ns).Get(ctx, "owned-widget", metav1.GetOptions{})
		return err
	})
	_, err = kube.CoreV1().ConfigMaps(ns).Get(ctx, "bystander", metav1.GetOptions{})
	require.NoError(t, err, "an object without owners must not be collected")
}

// Deleting a namespace empties it and then removes it, rather than leaving it Terminating.
func TestNamespaceDeletionCompletes(t *testing.T) {
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	dyn := dynamic.NewForConfigOrDie(cp.RESTConfig())
	ns := newNamespace(t, kube, "ns-")
	_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	createCustomObject(t, dyn, schema.GroupVersionResource{Group: "test.berth.dev", Version: "v1", Resource: "widgets"}, "Widget", ns, map[string]any{"size": int64(1)})

	require.NoError(t, kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	gone(t, "namespace "+ns, func(ctx context.Context) error {
		_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err
	})
}

// A plain Deployment gets a ReplicaSet and its pods (nothing schedules them here), and
// deleting the Deployment takes both with it.
func TestDeploymentGetsItsReplicaSetAndPods(t *testing.T) {
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	ns := newNamespace(t, kube, "deploy-")
	labels := map[string]string{"app": "web"}
	d, err := kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	var pods *corev1.PodList
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err = kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		return err == nil && len(pods.Items) == 3, nil
	})
	require.NoError(t, err, "the Deployment's 3 pods were not created")
	rsOwner := metav1.GetControllerOf(&pods.Items[0])
	require.NotNil(t, rsOwner)
	require.Equal(t, "ReplicaSet", rsOwner.Kind)
	rs, err := kube.AppsV1().ReplicaSets(ns).Get(ctx, rsOwner.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, metav1.IsControlledBy(rs, d), "the pods' ReplicaSet belongs to the Deployment")

	require.NoError(t, kube.AppsV1().Deployments(ns).Delete(ctx, d.Name, metav1.DeleteOptions{}))
	gone(t, "the ReplicaSet", func(ctx context.Context) error {
		_, err := kube.AppsV1().ReplicaSets(ns).Get(ctx, rs.Name, metav1.GetOptions{})
		return err
	})
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err = kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		return err == nil && len(pods.Items) == 0, nil
	})
	require.NoError(t, err, "the Deployment's pods outlived it")
}

// A pod that names a ResourceClaimTemplate gets its own ResourceClaim from it (linked from the
// pod's status and owned by the pod), and the claim goes when the pod goes, so the devices it
// would hold are not kept for a pod that no longer exists.
func TestResourceClaimControllerMakesAndRemovesPodClaims(t *testing.T) {
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	ns := newNamespace(t, kube, "claims-")
	_, err := kube.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "two-gpus"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2}}},
		}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer"},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "main", Image: "trainer", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("two-gpus")}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	var claimName string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return false, nil
		}
		claimName = *p.Status.ResourceClaimStatuses[0].ResourceClaimName
		return true, nil
	})
	require.NoError(t, err, "the pod's status never named a claim made from its template")
	claim, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, metav1.IsControlledBy(claim, pod), "the generated claim belongs to its pod")
	require.Equal(t, "gpu.nvidia.com", claim.Spec.Devices.Requests[0].Exactly.DeviceClassName, "the claim is the template's spec")
	require.EqualValues(t, 2, claim.Spec.Devices.Requests[0].Exactly.Count)

	require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	gone(t, "the pod's claim", func(ctx context.Context) error {
		_, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
		return err
	})
}

// A Service with a selector gets an EndpointSlice naming its Ready pods on the target port,
// as kube-controller-manager's EndpointSlice controller writes it (gateways read Service
// backends from there). The pod's address is not loopback: the apiserver refuses those in
// EndpointSlices (pkg/sim's PodNetwork gives simulated pods such addresses).
func TestServiceGetsEndpointSlices(t *testing.T) {
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	ns := newNamespace(t, kube, "slices-")
	node, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "slices-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	_, err = kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(3000)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo-0", Labels: map[string]string{"app": "echo"}},
		Spec:       corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "echo", Image: "echo"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.9.9.9", PodIPs: []corev1.PodIP{{IP: "10.9.9.9"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	_, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)

	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=echo"})
		if err != nil || len(slices.Items) != 1 || len(slices.Items[0].Endpoints) != 1 || len(slices.Items[0].Ports) != 1 {
			return false, nil
		}
		s := slices.Items[0]
		return s.Endpoints[0].Addresses[0] == "10.9.9.9" && ptr.Deref(s.Endpoints[0].Conditions.Ready, false) && ptr.Deref(s.Ports[0].Port, 0) == 3000, nil
	})
	require.NoError(t, err, "no EndpointSlice names the Ready pod on port 3000")
}

// The Eviction API honours a PodDisruptionBudget: with two Ready pods and minAvailable 1 the
// first eviction is allowed and the second refused (429), once the disruption controller has
// counted the pods. Without that controller every eviction the budget covers is refused.
func TestEvictionHonoursPodDisruptionBudget(t *testing.T) {
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	ns := newNamespace(t, kube, "pdb-")
	labels := map[string]string{"app": "web"}
	for _, name := range []string{"a", "b"} {
		p, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		// A pending pod may always be evicted: these run and are Ready, as a kubelet reports.
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	_, err := kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	allows := func(n int32) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			pdb, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
			return err == nil && pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == n, nil
		})
		require.NoError(t, err, "the budget's status does not come to allow %d disruptions", n)
	}
	evict := func(name string) error {
		return kube.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	allows(1)
	require.NoError(t, evict("a"), "one of two pods may go")
	allows(0)
	err = evict("b")
	require.True(t, apierrors.IsTooManyRequests(err), "the last pod is refused with 429, got %v", err)
	_, err = kube.CoreV1().Pods(ns).Get(ctx, "b", metav1.GetOptions{})
	require.NoError(t, err, "the refused pod stays")
}
