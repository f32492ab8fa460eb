package v1alpha1

// Labels, annotations and environment variables of the controller↔scheduler contract
// (DESIGN.md). They follow Kthena's names so tools written for it keep working.
const (
	// BerthSchedulerName is the spec.schedulerName (of a ModelServing and of its pods) that
	// asks for berth-scheduler's profile.
	BerthSchedulerName = "berth-scheduler"

	// ManagedLabel "true" on a ModelServing, ModelBooster, ModelRoute, ModelServer,
	// AutoscalingPolicy(Binding), llm-d VariantAutoscaling or llmaz Playground, Service or
	// BackendRuntime asks berth-controller to act on it when it runs with --manage=berth
	// (beside Kthena's, llmaz's or llm-d's controllers). A ModelServing whose pods ask for
	// berth-scheduler needs no label. Objects Berth generates from a labelled one carry it.
	ManagedLabel = "serving.berth.sh/managed"

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
	// RoleTemplateHashLabel is the hash of the role template a pod was created from (its
	// replica counts and rollout settings left out), as Kthena 1.0 labels it: a
	// RoleRollingUpdate replaces the role replicas whose hash is not the role's current one.
	RoleTemplateHashLabel = "modelserving.volcano.sh/role-template-hash"
	// RevisionRolesAnnotation on a ModelServing's pod lists the RoleTemplateHash of every
	// role of the revision the pod was created under, "<role>=<hash>,..." sorted by role:
	// berth-router pairs a prefill with a decode of another revision only when one of the
	// two revisions has both their templates (a RoleRollingUpdate replaced one role and left
	// the other as it was).
	RevisionRolesAnnotation = "workload.berth.sh/revision-roles"

	// ModelBoosterNameLabel names the ModelBooster that an object (ModelServing, ModelServer,
	// ModelRoute, AutoscalingPolicy, AutoscalingPolicyBinding) was generated from.
	ModelBoosterNameLabel = "modelbooster.volcano.sh/name"
	// ModelBoosterBackendLabel names the backend of the ModelBooster an object belongs to
	// (absent on the objects shared by every backend: the ModelRoute and the optimizer's policy
	// and binding).
	ModelBoosterBackendLabel = "modelbooster.volcano.sh/backend"

	// Kthena's ModelBooster controller labels what it generates (ModelServing, ModelServer,
	// ModelRoute and the pod templates) with these keys; Berth sets them too, beside its
	// own, so selectors written for Kthena find the same objects and pods.
	// KthenaModelNameLabel is the ModelBooster's metadata.name.
	KthenaModelNameLabel = GroupName + "/model-name"
	// KthenaBackendNameLabel is the backend's name ("" on the objects shared by every
	// backend, as Kthena writes it on the ModelRoute).
	KthenaBackendNameLabel = GroupName + "/backend-name"
	// KthenaManagedByLabel is KthenaManagedByValue on every generated object.
	KthenaManagedByLabel = GroupName + "/managed-by"
	// KthenaManagedByValue is the value Kthena gives KthenaManagedByLabel: the API group.
	KthenaManagedByValue = GroupName

	// ScaleToZeroGracePeriodAnnotation on a scale target (for example a ModelServing) is the
	// Go duration its autoscaler waits, with a recommendation of zero the whole time, before
	// it takes the target from one replica to zero. ModelBooster sets it from a backend's
	// scaleToZeroGracePeriod; any object with a scale subresource may carry it.
	ScaleToZeroGracePeriodAnnotation = "autoscaling.berth.sh/scale-to-zero-grace-period"

	// DemandAnnotation on a ModelServing at zero replicas is the time (RFC 3339) a
	// berth-router last held a request for it: scale from zero. Every router replica holding
	// requests writes it (a merge patch, only when it is missing or a few seconds old, so a
	// burst writes it once or twice); berth-controller's autoscaler scales a target whose
	// demand is newer than its last scale to zero from zero to max(1, minReplicas), and
	// counts the demand as activity, so the scale-to-zero grace period starts again from it.
	DemandAnnotation = "autoscaling.berth.sh/demand"

	// GroupsThatFitAnnotation on a ModelServing placed by berth-scheduler is how many more
	// whole ServingGroups of its current template the cluster can place now, as the
	// scheduler's placement model counts them (a decimal, capped by the scheduler;
	// docs/autoscaling.md, "Placement-aware scale-up"). berth-scheduler writes it with
	// GroupsThatFitUntilAnnotation in one merge patch, when the count changes or the time
	// nears; the autoscaler caps a scale-up of the ModelServing at its replicas plus
	// the count while that time has not passed (from the replicas of
	// GroupsThatFitReplicasAnnotation), and scales blind otherwise.
	GroupsThatFitAnnotation = "scheduling.berth.sh/groups-that-fit"
	// GroupsThatFitUntilAnnotation is the time (RFC 3339) until which the scheduler vouches
	// for GroupsThatFitAnnotation: a scheduler that stopped publishing leaves a count nobody
	// acts on.
	GroupsThatFitUntilAnnotation = "scheduling.berth.sh/groups-that-fit-until"
	// GroupsThatFitReplicasAnnotation is the spec.replicas the count was made against
	// (groups of those replicas whose pods do not exist yet count as using capacity): the
	// autoscaler caps at this plus the count, so a scale-up it made after the count, whose
	// pods the count could not see, is not counted twice.
	GroupsThatFitReplicasAnnotation = "scheduling.berth.sh/groups-that-fit-replicas"
	// RoleReplicasThatFitAnnotation on a ModelServing of more than one role placed by
	// berth-scheduler is, per role, how many more replicas of that role every placed group
	// can take now, inside its own domain, and the role's replicas the count was made
	// against: JSON {"decode": {"fit": 1, "replicas": 2}, ...}. Written and vouched for with
	// GroupsThatFitAnnotation (same until time); a disaggregatedTarget caps a role's
	// scale-up at replicas plus fit.
	RoleReplicasThatFitAnnotation = "scheduling.berth.sh/role-replicas-that-fit"

	// GroupSizeEnv is the number of pods of a role replica (workers + 1).
	GroupSizeEnv = "GROUP_SIZE"
	// EntryAddressEnv is the stable DNS name of the role replica's entry pod.
	EntryAddressEnv = "ENTRY_ADDRESS"
	// WorkerIndexEnv is 0 on the entry pod and 1..workers on the workers.
	WorkerIndexEnv = "WORKER_INDEX"

	// LeaderWorkerSetCompatAnnotation "true" on a ModelServing gives its pods what a
	// LeaderWorkerSet's pods get, so manifests written for LWS (an llmaz Service's workload
	// template) run unchanged: the environment variables LWS_LEADER_ADDRESS, LWS_GROUP_SIZE
	// and LWS_WORKER_INDEX (the entry address, group size and worker index) and the labels
	// leaderworkerset.sigs.k8s.io/worker-index and leaderworkerset.sigs.k8s.io/group-index.
	LeaderWorkerSetCompatAnnotation = "workload.berth.sh/leaderworkerset-compat"
	// LWSWorkerIndexLabel and LWSGroupIndexLabel are LeaderWorkerSet's pod labels.
	LWSWorkerIndexLabel = "leaderworkerset.sigs.k8s.io/worker-index"
	LWSGroupIndexLabel  = "leaderworkerset.sigs.k8s.io/group-index"
)
