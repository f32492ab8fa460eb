// Package sim holds the simulated parts of a cluster that tests and the sandbox run instead
// of real machines: a kubelet that "runs" bound pods.
package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// Kubelet makes bound pods Running and Ready after StartDelay, with an IP on 127.0.0.0/8,
// for every node (it stands in for all kubelets at once). Tests use it to fail pods,
// restart containers and lose nodes. It is also every node's gpu.nvidia.com DRA plugin (see
// kubeletdra.go): it publishes the ResourceSlice of a node with DRA GPUs and starts a pod
// only once its ResourceClaims are allocated to the node and reserved for it.
type Kubelet struct {
	client     kubernetes.Interface
	startDelay time.Duration
	nextIP     atomic.Uint32

	mu      sync.Mutex
	started map[string]bool // pod UIDs already being started
	// prepared are the running pods' prepared claims; prepareErrors the last reason a
	// pod's claims could not be prepared, so that each reason is one event.
	prepared      map[types.UID]preparedPod
	prepareErrors map[types.UID]string

	// PodNetwork, when not 0, is the first octet of pod IPs in place of 127: addresses
	// EndpointSlices accept (the apiserver refuses loopback ones, so the EndpointSlice
	// controller leaves 127.x pods out of every Service). Such a pod's servers listen on
	// PodLoopback(ip), and clients reach them with DialPodNetwork. Set it before Run.
	PodNetwork byte

	// BeforeReady, when set, is called with a pod that has its IP, just before the kubelet
	// reports it Running and Ready: the simulated engines start there, so an engine
	// listens before anything routes to its pod. Set it before Run.
	BeforeReady func(ctx context.Context, p *corev1.Pod)
}

// NewKubelet returns a simulated kubelet; call Run to start it.
func NewKubelet(client kubernetes.Interface, startDelay time.Duration) *Kubelet {
	k := &Kubelet{client: client, startDelay: startDelay, started: map[string]bool{},
		prepared: map[types.UID]preparedPod{}, prepareErrors: map[types.UID]string{}}
	// Start pod IPs at a random place in 127.0.0.0/8: test packages run as parallel
	// processes on one loopback, and engines listen on their pods' IPs, so two kubelets
	// counting from the same first address would hand two engines one address.
	k.nextIP.Store(rand.Uint32N(254 * 256 * 200))
	return k
}

// Run watches pods until ctx ends.
func (k *Kubelet) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(k.client, 0)
	inf := factory.Core().V1().Pods().Informer()
	handle := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			k.observe(ctx, p)
		}
	}
	// A pod removed at once (grace period 0, a lost node) is seen only as deleted: nothing
	// stays prepared for it.
	gone := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			k.unprepare(p.UID)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, n any) { handle(n) }, DeleteFunc: gone})
	publish := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			k.publishSlice(ctx, n)
		}
	}
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: publish, UpdateFunc: func(_, n any) { publish(n) }})
	factory.Start(ctx.Done())
	<-ctx.Done()
}

// observe starts a newly bound pod once, and finishes the deletion of a terminating one.
func (k *Kubelet) observe(ctx context.Context, p *corev1.Pod) {
	if p.Spec.NodeName != "" && p.DeletionTimestamp != nil {
		k.unprepare(p.UID)
		// A kubelet stops the containers, then removes the pod for good; ours stops at once.
		go func() {
			err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
				GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				klog.FromContext(ctx).Error(err, "sim kubelet: finish pod deletion", "pod", klog.KObj(p))
			}
		}()
		return
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		k.unprepare(p.UID)
	}
	if p.Spec.NodeName == "" || p.Status.Phase != "" && p.Status.Phase != corev1.PodPending {
		return
	}
	k.mu.Lock()
	if k.started[string(p.UID)] {
		k.mu.Unlock()
		return
	}
	k.started[string(p.UID)] = true
	k.mu.Unlock()
	time.AfterFunc(k.startDelay, func() { k.start(ctx, p) })
}

// start prepares the pod's claims and then runs it; while its claims cannot be prepared it
// stays Pending and start tries again. seen is the pod as it was bound.
func (k *Kubelet) start(ctx context.Context, seen *corev1.Pod) {
	ns, name, uid := seen.Namespace, seen.Name, seen.UID
	if ctx.Err() != nil {
		return
	}
	if len(seen.Spec.ResourceClaims) > 0 {
		// The claims' names (and whether the pod is still wanted) are in its current status.
		p, err := k.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.UID != uid || p.DeletionTimestamp != nil {
			if err != nil && !apierrors.IsNotFound(err) {
				klog.FromContext(ctx).Error(err, "sim kubelet: start pod", "pod", klog.KRef(ns, name))
			}
			return
		}
		if err := k.prepare(ctx, p); err != nil {
			k.failedPrepare(ctx, p, err)
			time.AfterFunc(prepareRetry, func() { k.start(ctx, seen) })
			return
		}
	}
	k.mu.Lock()
	delete(k.prepareErrors, uid)
	k.mu.Unlock()
	if err := k.markRunning(ctx, ns, name, uid); err != nil {
		// Deleted while its claims were being prepared.
		k.unprepare(uid)
		if !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "sim kubelet: start pod", "pod", klog.KRef(ns, name))
		}
	}
}

func (k *Kubelet) ip() string {
	// Last octet 1..254, so no pod gets a network or broadcast-looking address and no two
	// pods share one (until 16 million pods).
	n := k.nextIP.Add(1) - 1
	last, rest := 1+n%254, n/254
	first := byte(127)
	if k.PodNetwork != 0 {
		first = k.PodNetwork
	}
	return fmt.Sprintf("%d.%d.%d.%d", first, 1+(rest>>8)%255, rest&0xff, last)
}

func (k *Kubelet) markRunning(ctx context.Context, ns, name string, uid any) error {
	return k.updateStatus(ctx, ns, name, func(p *corev1.Pod) bool {
		if string(p.UID) != fmt.Sprint(uid) || p.Status.Phase == corev1.PodRunning {
			return false
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = k.ip()
		p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
		p.Status.HostIP = "127.0.0.1"
		p.Status.StartTime = &now
		p.Status.Conditions = setPodCondition(p.Status.Conditions, corev1.PodReady, corev1.ConditionTrue, now)
		p.Status.Conditions = setPodCondition(p.Status.Conditions, corev1.ContainersReady, corev1.ConditionTrue, now)
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, Ready: true, Started: ptrTo(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		if k.BeforeReady != nil {
			k.BeforeReady(ctx, p)
		}
		return true
	})
}

// FailPod makes a pod Failed, as when its process exits for good.
func (k *Kubelet) FailPod(ctx context.Context, ns, name string) error {
	return k.updateStatus(ctx, ns, name, func(p *corev1.Pod) bool {
		now := metav1.Now()
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = setPodCondition(p.Status.Conditions, corev1.PodReady, corev1.ConditionFalse, now)
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = false
			p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: now}}
		}
		return true
	})
}

// RestartContainer restarts the pod's first container: its restartCount grows and the pod
// stays Running, as a kubelet does after a crash.
func (k *Kubelet) RestartContainer(ctx context.Context, ns, name string) error {
	return k.updateStatus(ctx, ns, name, func(p *corev1.Pod) bool {
		if len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		now := metav1.Now()
		c := &p.Status.ContainerStatuses[0]
		c.RestartCount++
		c.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: now}}
		c.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		return true
	})
}

// LoseNode deletes a node and force-deletes its pods, as the node lifecycle and pod
// garbage collectors do when a machine is gone.
func (k *Kubelet) LoseNode(ctx context.Context, node string) error {
	if err := k.client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	pods, err := k.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func (k *Kubelet) updateStatus(ctx context.Context, ns, name string, mutate func(*corev1.Pod) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !mutate(p) {
			return nil
		}
		_, err = k.client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

func setPodCondition(conds []corev1.PodCondition, typ corev1.PodConditionType, status corev1.ConditionStatus, now metav1.Time) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == typ {
			if conds[i].Status != status {
				conds[i].Status, conds[i].LastTransitionTime = status, now
			}
			return conds
		}
	}
	return append(conds, corev1.PodCondition{Type: typ, Status: status, LastTransitionTime: now})
}

func ptrTo[T any](v T) *T { return &v }
