package main

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// snapshot is what the watcher read at one moment.
type snapshot struct {
	at          time.Duration // from the start
	cheap, dear int32         // the ModelServings' spec.replicas: what the autoscaler asked for
	pending     int           // ServingGroups with a pod not bound to a node
	ready       int           // serving pods Ready
}

type watch struct {
	mu      sync.Mutex
	samples []snapshot
	cancel  context.CancelFunc
	done    chan struct{}
}

// startWatch reads the ModelServings' replicas and the namespace's pods every sample until
// stop. Polling, not an informer: the bench reads what a user's `kubectl get` would, at a
// fixed rate in both modes.
func startWatch(ctx context.Context, cl client.Client, kube kubernetes.Interface, start time.Time) *watch {
	ctx, cancel := context.WithCancel(ctx)
	w := &watch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(sample)
		defer tick.Stop()
		for {
			s := snapshot{at: time.Since(start)}
			for name, into := range map[string]*int32{"cheap": &s.cheap, "dear": &s.dear} {
				var ms workloadv1alpha1.ModelServing
				if cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ms) == nil {
					*into = ptr.Deref(ms.Spec.Replicas, 0)
				}
			}
			if pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
				waiting := map[string]bool{}
				for _, p := range pods.Items {
					if p.DeletionTimestamp != nil {
						continue
					}
					if p.Spec.NodeName == "" {
						waiting[p.Labels[workloadv1alpha1.GroupNameLabel]] = true
					} else if ready(&p) {
						s.ready++
					}
				}
				s.pending = len(waiting)
			}
			if ctx.Err() == nil {
				w.mu.Lock()
				w.samples = append(w.samples, s)
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the watch and returns what it read.
func (w *watch) stop() []snapshot {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
