package workload

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// createdPodTTL is how long a pod this controller created counts as existing while its
// cache has not seen it. The pod informer sees every pod it creates (expectations clear
// when it does); the limit only covers a pod created and deleted within one relist of the
// watch, which the informer never sees.
const createdPodTTL = 30 * time.Second

// createdPods remembers the pods the controller created that its cache has not shown yet
// (as ReplicaSet's expectations do). A pass reads pods from the cache; right after a pass
// created a role replica's five pods, the watch events of the first may start the next pass
// before the others are in the cache, and that pass would see "4 of 5 pods are gone" and
// recreate the role replica (RoleRecreate): bench/scalebench's fill of 100 ModelServings
// deleted 25 pods so. A pending pod is neither lost nor created again.
type createdPods struct {
	mu sync.Mutex
	// pending is by controlling ModelServing's UID, then by pod name.
	pending map[types.UID]map[string]createdPod
}

// createdPod is when a pod was created, and its group's ordinal.
type createdPod struct {
	at    time.Time
	group int
}

// created records that the controller created pod name of group for ModelServing owner.
func (c *createdPods) created(owner types.UID, name string, group int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[types.UID]map[string]createdPod{}
	}
	if c.pending[owner] == nil {
		c.pending[owner] = map[string]createdPod{}
	}
	c.pending[owner][name] = createdPod{at: at, group: group}
}

// observed records that the cache now holds pod obj (its informer's add event).
func (c *createdPods) observed(obj client.Object) {
	ref := metav1.GetControllerOf(obj)
	if ref == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.pending[ref.UID]; m != nil {
		delete(m, obj.GetName())
		if len(m) == 0 {
			delete(c.pending, ref.UID)
		}
	}
}

// pendingFor is the pods created for owner that the cache does not show yet: their group's
// ordinal by name. Those the cache shows (present), and those older than createdPodTTL, are
// forgotten.
func (c *createdPods) pendingFor(owner types.UID, present func(name string) bool, now time.Time) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.pending[owner]
	if len(m) == 0 {
		return nil
	}
	out := map[string]int{}
	for name, p := range m {
		if present(name) || now.Sub(p.at) > createdPodTTL {
			delete(m, name)
			continue
		}
		out[name] = p.group
	}
	if len(m) == 0 {
		delete(c.pending, owner)
	}
	return out
}

// forgetGroup drops what is remembered of group's pods (the group is deleted).
func (c *createdPods) forgetGroup(owner types.UID, group int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, p := range c.pending[owner] {
		if p.group == group {
			delete(c.pending[owner], name)
		}
	}
}

// forget drops what is remembered for owner (a ModelServing deleted).
func (c *createdPods) forget(owner types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, owner)
}
