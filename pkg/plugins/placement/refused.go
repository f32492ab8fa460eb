package placement

import fwk "k8s.io/kube-scheduler/framework"

// GroupRefusedKey marks, in a scheduling cycle's state, a pod whose group the gang plugin
// refused in PreFilter (backing off, or no plan). kube-scheduler runs every PreFilter plugin
// after an Unschedulable one and records the last to refuse as the pod's rejector, whose
// queueing hints alone decide when the pod is retried. The other plugins that plan groups
// (topology) skip a marked pod: they would only plan again to say the same, and, recorded as
// the rejector with hints of their own, retry every refused pod on every freed pod, where
// the gang plugin retries a refused group through one pod once its backoff ends.
const GroupRefusedKey fwk.StateKey = "berth.sh/group-refused"

// GroupRefused is the state written under GroupRefusedKey.
type GroupRefused struct{}

// Clone implements fwk.StateData.
func (GroupRefused) Clone() fwk.StateData { return GroupRefused{} }

// Refused reports whether the gang plugin refused the pod's group earlier in this cycle.
func Refused(state fwk.CycleState) bool {
	_, err := state.Read(GroupRefusedKey)
	return err == nil
}
