// Package api checks the CRDs against a real kube-apiserver: defaults, validation and the
// examples a user would apply first.
package api

import (
	"testing"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
)

// cp is the one control plane this test package shares.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	cptest.Main(m, &cp)
}
