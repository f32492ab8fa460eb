package v1alpha1

// Labels, annotations and environment variables of the controller↔scheduler contract
// (DESIGN.md). They follow Kthena's names so tools written for it keep working.
const (
	// ModelServingNameLabel names the ModelServing a pod, Service or PodGroup belongs to.
	ModelServingNameLabel = "modelserving.volcano.sh/name"
	// GroupNameLabel names the ServingGroup ("<ms>-<i>").
	GroupNameLabel = "modelserving.volcano.sh/group-name"
	// RoleLabel names the role ("prefill", "decode", ...).
	RoleLabel = "modelserving.volcano.sh/role"
	// RoleIDLabel names the role replica ("<role>-<j>").
	RoleIDLabel = "modelserving.volcano.sh/role-id"
	// RevisionLabel is the ControllerRevision hash a pod was created from.
	RevisionLabel = "modelserving.volcano.sh/revision"
	// EntryLabel is "true" on the entry pod of a role replica.
	EntryLabel = "modelserving.volcano.sh/entry"

	// GroupSizeEnv is the number of pods of a role replica (workers + 1).
	GroupSizeEnv = "GROUP_SIZE"
	// EntryAddressEnv is the stable DNS name of the role replica's entry pod.
	EntryAddressEnv = "ENTRY_ADDRESS"
	// WorkerIndexEnv is 0 on the entry pod and 1..workers on the workers.
	WorkerIndexEnv = "WORKER_INDEX"
)
