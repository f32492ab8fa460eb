package rbac

import "testing"

// The ModelServing reconciler's requests for NVIDIA ComputeDomains (pkg/workload,
// annotation berth.sh/compute-domain): each group's domain read uncached, created, marked
// retired with a merge patch and deleted, and the CRD probed with a list.
func TestShippedRBACCoversComputeDomains(t *testing.T) {
	assertAllowed(t, []need{
		{"resource.nvidia.com", "computedomains", []string{"get", "list", "create", "patch", "delete"}},
	})
}
