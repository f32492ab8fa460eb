package llmazserving

// Reasons of the events the Playground and Service reconcilers record, besides the reason of
// a problem that stops them (Reason* in status.go), sent once as a warning when it appears.
const (
	// ReasonCreated and ReasonUpdated: an object a Playground or Service owns was created, or
	// brought back in line with it.
	ReasonCreated = "Created"
	ReasonUpdated = "Updated"
)

// Actions of those events (events.k8s.io/v1 requires one).
const (
	actionSync   = "Sync"
	actionCreate = "Create"
	actionUpdate = "Update"
)
