package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// podCounts follows the benchmark namespace's pods through an informer in the parent
// process (which both modes pay for alike): how many exist, are bound and are Ready.
type podCounts struct {
	mu    sync.Mutex
	state map[string]podState // by name
}

type podState struct{ bound, ready bool }

func watchPods(ctx context.Context, kube kubernetes.Interface) (*podCounts, error) {
	pc := &podCounts{state: map[string]podState{}}
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	set := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			pc.mu.Lock()
			pc.state[p.Name] = podState{bound: p.Spec.NodeName != "", ready: podutil.IsPodReady(p)}
			pc.mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, n any) { set(n) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				pc.mu.Lock()
				delete(pc.state, p.Name)
				pc.mu.Unlock()
			}
		},
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("pod informer did not sync")
	}
	return pc, nil
}

// counts is how many pods exist, are bound and are Ready now.
func (pc *podCounts) counts() (pods, bound, ready int) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, s := range pc.state {
		pods++
		if s.bound {
			bound++
		}
		if s.ready {
			ready++
		}
	}
	return pods, bound, ready
}
