package main

import (
	"strings"
	"testing"
)

func TestRequestKey(t *testing.T) {
	for _, c := range []struct {
		method, path string
		watch        bool
		want         string
	}{
		{"POST", "/api/v1/namespaces/scale/pods", false, "create pods"},
		{"PUT", "/apis/workload.serving.volcano.sh/v1alpha1/namespaces/scale/modelservings/m0001/status", false, "update modelservings/status"},
		{"GET", "/apis/scheduling.volcano.sh/v1beta1/namespaces/scale/podgroups/m0001-0", false, "get podgroups"},
		{"GET", "/api/v1/pods", false, "list pods"},
		{"GET", "/api/v1/pods", true, "watch pods"},
		{"DELETE", "/api/v1/namespaces/scale/pods", false, "deletecollection pods"},
		{"DELETE", "/api/v1/namespaces/scale", false, "delete namespaces"},
		{"PATCH", "/apis/events.k8s.io/v1/namespaces/scale/events/e", false, "patch events"},
		{"GET", "/apis", false, "get /apis"},
	} {
		if got := requestKey(c.method, c.path, c.watch); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

func TestPerObject(t *testing.T) {
	got := perObject(map[string]int{"create pods": 20, "update modelservings/status": 6, "list pods": 4, "get podgroups": 2}, 2, isWrite)
	if want := "total 13.0, create pods 10.00, update modelservings/status 3.00"; got != want {
		t.Errorf("writes: %q, want %q", got, want)
	}
	if got := perObject(map[string]int{"list pods": 4, "get podgroups": 2, "watch pods": 1, "get /apis": 1}, 200, isRead); got != "total 0.0" {
		t.Errorf("reads under 0.05 per object: %q", got)
	}
	if got := perObject(map[string]int{"list pods": 4, "get podgroups": 2, "reconcile modelserving": 6}, 2, isRead); !strings.HasPrefix(got, "total 3.0, list pods 2.00") {
		t.Errorf("reads: %q", got)
	}
}
