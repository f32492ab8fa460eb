package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podState is what the bench needs to know of a pod: where it is bound, or whether the
// scheduler reported it unschedulable (PodScheduled=False, reason Unschedulable).
type podState struct {
	node          string
	boundAt       time.Time // when the informer first saw it bound
	unschedulable bool
	message       string
}

// tracker follows the pods of one namespace through an informer, so waiting for a group
// wakes on the watch event that resolves it instead of polling the apiserver.
type tracker struct {
	mu      sync.Mutex
	pods    map[string]podState
	changed chan struct{} // signalled (without blocking) after every event
}

func startTracker(ctx context.Context, kube kubernetes.Interface, ns string) (*tracker, error) {
	t := &tracker{pods: map[string]podState{}, changed: make(chan struct{}, 1)}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	set := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		st := podState{node: p.Spec.NodeName}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				st.unschedulable, st.message = true, c.Message
			}
		}
		t.mu.Lock()
		if st.node != "" {
			st.boundAt = t.pods[p.Name].boundAt
			if st.boundAt.IsZero() {
				st.boundAt = time.Now()
			}
		}
		t.pods[p.Name] = st
		t.mu.Unlock()
		t.signal()
	}
	del := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			t.mu.Lock()
			delete(t.pods, p.Name)
			t.mu.Unlock()
			t.signal()
		}
	}
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: set, UpdateFunc: func(_, n any) { set(n) }, DeleteFunc: del,
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("%v informer did not sync", typ)
		}
	}
	return t, nil
}

func (t *tracker) signal() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// waitFor blocks until done(states of names) is true, the timeout passes, or abort
// receives. The states slice is nil for a pod the informer has not seen (or saw deleted).
func (t *tracker) waitFor(names []string, timeout time.Duration, abort <-chan struct{}, done func([]*podState) bool) ([]*podState, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		t.mu.Lock()
		states := make([]*podState, len(names))
		for i, n := range names {
			if st, ok := t.pods[n]; ok {
				states[i] = &st
			}
		}
		t.mu.Unlock()
		if done(states) {
			return states, nil
		}
		select {
		case <-t.changed:
		case <-timer.C:
			return states, errTimeout
		case <-abort:
			return states, errSchedulerExited
		}
	}
}

var (
	errTimeout         = errors.New("timed out")
	errSchedulerExited = errors.New("the scheduler exited")
)

// resolved: every pod is bound or reported unschedulable.
func resolved(states []*podState) bool {
	for _, st := range states {
		if st == nil || (st.node == "" && !st.unschedulable) {
			return false
		}
	}
	return true
}

// gone: the informer has seen every pod deleted.
func gone(states []*podState) bool {
	for _, st := range states {
		if st != nil {
			return false
		}
	}
	return true
}
