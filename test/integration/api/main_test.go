// Package api checks the CRDs against a real kube-apiserver: defaults, validation and the
// examples a user would apply first; and the install (kustomize base and Helm chart).
package api

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
)

// cp is the one control plane this test package shares. Its apiserver limits the system-*
// priority classes to namespaces with a quota for them, as GKE's does
// (testdata/admission-gke.yaml), so the install is tested where that bites.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	admission, err := filepath.Abs(filepath.Join("testdata", "admission-gke.yaml"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cptest.MainWithOptions(m, &cp, controlplane.Options{
		APIServerFlags: append(controlplane.DefaultAPIServerFlags(), "--admission-control-config-file="+admission),
	})
}
