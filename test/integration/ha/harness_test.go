// Package ha runs berth-scheduler and berth-controller as they ship, two replicas each with
// leader election, and kills the leader with SIGKILL in the middle of its work: the standby
// must take over within the lease duration, and nothing may be duplicated, orphaned or
// partly bound. Each replica is a separate process (internal/replicas), so a kill is a real
// crash: no deferred call runs and the lease is not released.
package ha

import (
	"testing"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/replicas"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	replicas.RunIfReplica()
	ctrl.SetLogger(klog.NewKlogr())
	cptest.Main(m, &cp)
}

// pair starts two replicas of role and returns the one that leads and the standby.
func pair(t *testing.T, role string) (lead, standby *replicas.Replica, both []*replicas.Replica) {
	t.Helper()
	both = []*replicas.Replica{replicas.Start(t, cp, role, role+"-0", ""), replicas.Start(t, cp, role, role+"-1", "")}
	lead = replicas.Leader(t, both...)
	standby = both[0]
	if standby == lead {
		standby = both[1]
	}
	t.Logf("%s leads", lead.Name)
	return lead, standby, both
}
