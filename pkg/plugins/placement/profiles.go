package placement

import (
	"sync"

	fwk "k8s.io/kube-scheduler/framework"
)

// Models hands each scheduler profile its own Model. berth-scheduler builds one Models per
// scheduler and gives it to every plugin factory; a profile is known by its framework
// handle, so two profiles in one process never share plans or accelerator classes.
type Models struct {
	mu       sync.Mutex
	byHandle map[fwk.Handle]*Model
}

// NewModels returns an empty set of models.
func NewModels() *Models { return &Models{byHandle: map[fwk.Handle]*Model{}} }

// For returns the profile's model, building it on first use.
func (ms *Models) For(h fwk.Handle) (*Model, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if m := ms.byHandle[h]; m != nil {
		return m, nil
	}
	m, err := NewModel(h)
	if err != nil {
		return nil, err
	}
	ms.byHandle[h] = m
	return m, nil
}
