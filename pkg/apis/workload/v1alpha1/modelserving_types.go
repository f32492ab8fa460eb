package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// ModelServingSpec defines the specification of the ModelServing resource.
//
// +kubebuilder:validation:XValidation:rule="(has(self.rolloutStrategy) && has(self.rolloutStrategy.type) && self.rolloutStrategy.type == 'RoleRollingUpdate') || self.template.roles.all(r, !has(r.maxUnavailable) && !has(r.partition))",message="roles[].maxUnavailable and roles[].partition are Kthena's RoleRollingUpdate settings: they need rolloutStrategy.type RoleRollingUpdate",fieldPath=".template.roles"
type ModelServingSpec struct {
	// Number of ServingGroups. That is the number of instances that run serving tasks
	// Default to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// SchedulerName defines the name of the scheduler used by ModelServing
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`

	// Plugins (Kthena 1.0) is a chain of built-in plugins that change every pod the
	// controller creates, in list order, before it is created: lws-standard-labels
	// (LeaderWorkerSet's pod labels, for a ModelServing a LeaderWorkerSet owns) and
	// demo-pod-tweaks (runtimeClassName, annotations, env). A plugin the controller does not
	// know, or a config it cannot read, stops pod creation; the PluginsAccepted condition and
	// a Warning event name it.
	// +optional
	// +listType=atomic
	Plugins []PluginSpec `json:"plugins,omitempty"`

	// Template defines the template for ServingGroup
	Template ServingGroup `json:"template"`

	// RolloutStrategy defines the strategy that will be applied to update replicas
	// +optional
	// +kubebuilder:default={}
	RolloutStrategy *RolloutStrategy `json:"rolloutStrategy,omitempty"`

	// RecoveryPolicy defines the recovery policy for the failed Pod to be rebuilt
	// +optional
	// +kubebuilder:default=RoleRecreate
	RecoveryPolicy RecoveryPolicy `json:"recoveryPolicy,omitempty"`

	// TopologySpreadConstraints spread ServingGroups (not pods) across topology domains.
	// +optional
	// +listType=atomic
	TopologySpreadConstraints []TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
}

// RecoveryPolicy says what the controller rebuilds when a pod of a ServingGroup fails.
// +kubebuilder:validation:Enum=ServingGroupRecreate;RoleRecreate;None
type RecoveryPolicy string

const (
	// ServingGroupRecreate will recreate all the pods in the ServingGroup if
	// 1. Any individual pod in the group is recreated; 2. Any containers/init-containers
	// in a pod is restarted. This is to ensure all pods/containers in the group will be
	// started in the same time.
	ServingGroupRecreate RecoveryPolicy = "ServingGroupRecreate"
	// RoleRecreate will recreate all pods in one Role if
	// 1. Any individual pod in the group is recreated; 2. Any containers/init-containers
	// in a pod is restarted.
	RoleRecreate RecoveryPolicy = "RoleRecreate"
	// NoneRestartPolicy will follow the same behavior as the default pod or deployment.
	NoneRestartPolicy RecoveryPolicy = "None"
)

// PluginType says how a plugin is implemented. Kthena 1.0 (and Berth) know only BuiltIn:
// plugins compiled into the controller.
// +kubebuilder:validation:Enum=BuiltIn
type PluginType string

const (
	// PluginTypeBuiltIn is a plugin compiled into the controller, chosen by its name.
	PluginTypeBuiltIn PluginType = "BuiltIn"
)

// PluginTarget says which pods of a role replica a plugin changes.
// +kubebuilder:validation:Enum=All;Entry;Worker
type PluginTarget string

const (
	// PluginTargetAll is every pod (the default).
	PluginTargetAll PluginTarget = "All"
	// PluginTargetEntry is the entry pod of each role replica.
	PluginTargetEntry PluginTarget = "Entry"
	// PluginTargetWorker is the worker pods of each role replica.
	PluginTargetWorker PluginTarget = "Worker"
)

// PluginScope restricts which pods a plugin changes.
type PluginScope struct {
	// Roles limits the plugin to pods of these roles; empty means every role.
	// +optional
	// +listType=atomic
	Roles []string `json:"roles,omitempty"`

	// Target limits the plugin to entry pods, worker pods, or all pods (empty: all).
	// +optional
	Target PluginTarget `json:"target,omitempty"`
}

// PluginSpec declares a plugin of a ModelServing (Kthena 1.0).
type PluginSpec struct {
	// Name is the plugin: a built-in plugin's registered name (lws-standard-labels,
	// demo-pod-tweaks).
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Type is the plugin's kind; only BuiltIn.
	// +optional
	// +kubebuilder:default=BuiltIn
	Type PluginType `json:"type,omitempty"`

	// Config is the plugin's own configuration, read by the plugin.
	// +optional
	Config *apiextensionsv1.JSON `json:"config,omitempty"`

	// Scope narrows which pods the plugin changes; by default every pod.
	// +optional
	Scope *PluginScope `json:"scope,omitempty"`
}

// RolloutStrategyType names a rollout strategy.
// +kubebuilder:validation:Enum=ServingGroupRollingUpdate;RoleRollingUpdate
type RolloutStrategyType string

const (
	// ServingGroupRollingUpdate indicates that ServingGroup replicas will be updated one by one.
	ServingGroupRollingUpdate RolloutStrategyType = "ServingGroupRollingUpdate"
	// RoleRollingUpdate (Kthena 1.0) updates role replicas inside every ServingGroup at or
	// above the partition, role by role: a role whose template did not change is not
	// touched, and each role keeps its own maxUnavailable and partition
	// (template.roles[].maxUnavailable, template.roles[].partition).
	RoleRollingUpdate RolloutStrategyType = "RoleRollingUpdate"
)

// RolloutStrategy defines the strategy that the ModelServing controller
// will use to perform replica updates.
type RolloutStrategy struct {
	// Type defines the rollout strategy: ServingGroupRollingUpdate (the spec's, the default)
	// replaces whole ServingGroups; RoleRollingUpdate (Kthena 1.0) replaces role replicas
	// inside each group, with each role's maxUnavailable and partition. With
	// RoleRollingUpdate only rollingUpdateConfiguration.partition applies (groups below it
	// are left alone); maxUnavailable and maxSurge are the group-level rollout's.
	// +optional
	// +kubebuilder:default=ServingGroupRollingUpdate
	Type RolloutStrategyType `json:"type,omitempty"`

	// RollingUpdateConfiguration defines the parameters to be used when type is RollingUpdateStrategyType.
	// +optional
	// +kubebuilder:default={}
	RollingUpdateConfiguration *RollingUpdateConfiguration `json:"rollingUpdateConfiguration,omitempty"`
}

// RollingUpdateConfiguration defines the parameters to be used for RollingUpdateStrategyType.
//
// The int-or-string rules below run after defaulting, so "maxUnavailable: 0" alone is
// rejected because maxSurge defaults to 0.
// +kubebuilder:validation:XValidation:rule="!has(self.maxUnavailable) || (type(self.maxUnavailable) == string ? self.maxUnavailable.matches('^[0-9]+%$') : self.maxUnavailable >= 0)",message="must be a non-negative integer or a percentage such as \"25%\"",fieldPath=".maxUnavailable"
// +kubebuilder:validation:XValidation:rule="!has(self.maxSurge) || (type(self.maxSurge) == string ? self.maxSurge.matches('^[0-9]+%$') : self.maxSurge >= 0)",message="must be a non-negative integer or a percentage such as \"25%\"",fieldPath=".maxSurge"
// +kubebuilder:validation:XValidation:rule="!has(self.partition) || (type(self.partition) == string ? self.partition.matches('^[0-9]+%$') : self.partition >= 0)",message="must be a non-negative integer or a percentage such as \"50%\"",fieldPath=".partition"
// +kubebuilder:validation:XValidation:rule="!(has(self.maxUnavailable) && has(self.maxSurge) && (type(self.maxUnavailable) == string ? self.maxUnavailable.matches('^0+%$') : self.maxUnavailable == 0) && (type(self.maxSurge) == string ? self.maxSurge.matches('^0+%$') : self.maxSurge == 0))",message="maxUnavailable and maxSurge cannot both be 0: the rollout could never replace a ServingGroup",fieldPath=".maxUnavailable"
type RollingUpdateConfiguration struct {
	// The maximum number of replicas that can be unavailable during the update.
	// Value can be an absolute number (ex: 5) or a percentage of total replicas at the start of update (ex: 10%).
	// Absolute number is calculated from percentage by rounding down.
	// This can not be 0 if MaxSurge is 0.
	// By default, a fixed value of 1 is used.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:default=1
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// The maximum number of replicas that can be scheduled above the original number of
	// replicas.
	// Value can be an absolute number (ex: 5) or a percentage of total replicas at
	// the start of the update (ex: 10%).
	// Absolute number is calculated from percentage by rounding up.
	// By default, a value of 0 is used.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:default=0
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`

	// Partition indicates the ordinal at which the ModelServing should be partitioned
	// for updates. During a rolling update, all ServingGroups from ordinal Replicas-1 to
	// Partition are updated. All ServingGroups from ordinal Partition-1 to 0 remain untouched.
	// The default value is 0. An integer (the spec's) or, as Kthena 1.0 allows, a
	// percentage of replicas (rounded up).
	// +optional
	// +kubebuilder:validation:XIntOrString
	Partition *intstr.IntOrString `json:"partition,omitempty"`
}

// ServingGroup is the smallest unit to complete the inference task
//
// +kubebuilder:validation:XValidation:rule="self.roles.all(r, self.roles.filter(x, x.name == r.name).size() == 1)",message="role names must be unique within a ServingGroup",fieldPath=".roles"
// +kubebuilder:validation:XValidation:rule="!has(self.gangPolicy) || !has(self.gangPolicy.minRoleReplicas) || self.gangPolicy.minRoleReplicas.all(k, self.roles.exists(r, r.name == k))",message="every key of minRoleReplicas must name a role of this ServingGroup",fieldPath=".gangPolicy.minRoleReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.gangPolicy) || !has(self.gangPolicy.minRoleReplicas) || self.gangPolicy.minRoleReplicas.all(k, self.roles.all(r, r.name != k || self.gangPolicy.minRoleReplicas[k] <= (has(r.replicas) ? r.replicas : 1)))",message="a minRoleReplicas value cannot exceed the replicas of its role",fieldPath=".gangPolicy.minRoleReplicas"
type ServingGroup struct {
	// RestartGracePeriodSeconds defines the grace time for the controller to rebuild the ServingGroup when an error occurs
	// Defaults to 0 (ServingGroup will be rebuilt immediately after an error)
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	RestartGracePeriodSeconds *int64 `json:"restartGracePeriodSeconds,omitempty"`

	// GangPolicy defines the gang scheduler config.
	// +optional
	GangPolicy *GangPolicy `json:"gangPolicy,omitempty"`

	// NetworkTopology defines the network topology affinity scheduling policy for the roles of the group,
	// it works only when the scheduler supports network topology feature. Either the spec's
	// flat form (Volcano's NetworkTopologySpec, copied to the group's PodGroup) or Kthena
	// 1.0's groupPolicy and rolePolicy, not both.
	// +optional
	NetworkTopology *NetworkTopology `json:"networkTopology,omitempty"`

	// Roles are the kinds of pods in a group, for example prefill and decode.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=atomic
	Roles []Role `json:"roles"`
}

// NetworkTopology is a ServingGroup's network topology in one of two shapes:
//
//   - the spec's: Volcano's NetworkTopologySpec written flat (mode, highestTierAllowed or
//     highestTierName) for the whole group; it becomes PodGroup.spec.networkTopology.
//   - Kthena 1.0's: groupPolicy for the whole group (PodGroup.spec.networkTopology) and
//     rolePolicy for every role replica (each role's PodGroup.spec.subGroupPolicy[] entry).
//
// The flat mode defaults to hard (the spec's default), so beside groupPolicy or rolePolicy
// a flat mode of hard is accepted and ignored; every other flat field is refused there.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.highestTierAllowed) && has(self.highestTierName) && size(self.highestTierName) > 0)",message="highestTierAllowed and highestTierName are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="!has(self.highestTierAllowed) || !(has(self.groupPolicy) || has(self.rolePolicy))",message="highestTierAllowed is the spec's flat form and cannot be mixed with Kthena 1.0's groupPolicy/rolePolicy: set it inside groupPolicy or rolePolicy",fieldPath=".highestTierAllowed"
// +kubebuilder:validation:XValidation:rule="!has(self.highestTierName) || size(self.highestTierName) == 0 || !(has(self.groupPolicy) || has(self.rolePolicy))",message="highestTierName is the spec's flat form and cannot be mixed with Kthena 1.0's groupPolicy/rolePolicy: set it inside groupPolicy or rolePolicy",fieldPath=".highestTierName"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode == 'hard' || !(has(self.groupPolicy) || has(self.rolePolicy))",message="mode is the spec's flat form and cannot be mixed with Kthena 1.0's groupPolicy/rolePolicy: set it inside groupPolicy or rolePolicy",fieldPath=".mode"
type NetworkTopology struct {
	// The spec's flat form: mode, highestTierAllowed, highestTierName.
	volcanov1beta1.NetworkTopologySpec `json:",inline"`

	// GroupPolicy (Kthena 1.0) is the network topology of the whole ServingGroup.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!(has(self.highestTierAllowed) && has(self.highestTierName) && size(self.highestTierName) > 0)",message="highestTierAllowed and highestTierName are mutually exclusive"
	GroupPolicy *volcanov1beta1.NetworkTopologySpec `json:"groupPolicy,omitempty"`

	// RolePolicy (Kthena 1.0) is the network topology of each role replica (an entry pod
	// and its workers).
	// +optional
	// +kubebuilder:validation:XValidation:rule="!(has(self.highestTierAllowed) && has(self.highestTierName) && size(self.highestTierName) > 0)",message="highestTierAllowed and highestTierName are mutually exclusive"
	RolePolicy *volcanov1beta1.NetworkTopologySpec `json:"rolePolicy,omitempty"`
}

// Policies resolves either shape into what the PodGroup carries: the group's topology and
// each role replica's (nil when none).
func (nt *NetworkTopology) Policies() (group, role *volcanov1beta1.NetworkTopologySpec) {
	if nt == nil {
		return nil, nil
	}
	if nt.GroupPolicy != nil || nt.RolePolicy != nil {
		return nt.GroupPolicy, nt.RolePolicy
	}
	return &nt.NetworkTopologySpec, nil
}

// GangPolicy defines the gang scheduling configuration.
type GangPolicy struct {
	// MinRoleReplicas defines the minimum number of replicas required for each role
	// in gang scheduling. This map allows users to specify different
	// minimum replica requirements for different roles.
	// Key: role name
	// Value: minimum number of replicas required for that role
	// +optional
	// +kubebuilder:validation:MaxProperties=4
	MinRoleReplicas map[string]int32 `json:"minRoleReplicas,omitempty"`
}

// Role defines the specific pod instance role that performs the inference task.
//
// +kubebuilder:validation:XValidation:rule="!has(self.workerReplicas) || self.workerReplicas == 0 || has(self.workerTemplate)",message="workerTemplate is required when workerReplicas is greater than 0",fieldPath=".workerTemplate"
// +kubebuilder:validation:XValidation:rule="!has(self.maxUnavailable) || (type(self.maxUnavailable) == string ? self.maxUnavailable.matches('^[0-9]*[1-9][0-9]*%$') : self.maxUnavailable >= 1)",message="must be a positive integer or a percentage such as \"50%\" (0 would never update the role)",fieldPath=".maxUnavailable"
// +kubebuilder:validation:XValidation:rule="!has(self.partition) || (type(self.partition) == string ? self.partition.matches('^[0-9]+%$') : self.partition >= 0)",message="must be a non-negative integer or a percentage such as \"50%\"",fieldPath=".partition"
type Role struct {
	// The name of a role. Name must be unique within an ServingGroup
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`
	Name string `json:"name"`

	// The number of a certain role.
	// For example, in Disaggregated Prefilling, setting the replica count for both the P and D roles to 1 results in 1P1D deployment configuration.
	// This approach can similarly be applied to configure a xPyD deployment scenario.
	// Default to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// EntryTemplate defines the template for the entry pod of a role.
	// Required: Currently, a role must have only one entry-pod.
	EntryTemplate PodTemplateSpec `json:"entryTemplate"`

	// WorkerReplicas defines the number for the worker pod of a role.
	// Required: Need to set the number of worker-pod replicas.
	// +optional
	// +kubebuilder:validation:Minimum=0
	WorkerReplicas int32 `json:"workerReplicas,omitempty"`

	// WorkerTemplate defines the template for the worker pod of a role.
	// +optional
	WorkerTemplate *PodTemplateSpec `json:"workerTemplate,omitempty"`

	// MaxUnavailable (Kthena 1.0) is how many replicas of this role may be unavailable at
	// once during a RoleRollingUpdate, in each ServingGroup: a number or a percentage of the
	// role's replicas (rounded down, at least 1). Unset: every outdated replica of the role
	// is replaced at once. Only with rolloutStrategy.type RoleRollingUpdate.
	// +optional
	// +kubebuilder:validation:XIntOrString
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// Partition (Kthena, after 1.0) keeps this role's replicas with an ordinal below it on
	// their revision during a RoleRollingUpdate, in each ServingGroup: a number or a
	// percentage of the role's replicas (rounded up). Only with rolloutStrategy.type
	// RoleRollingUpdate.
	// +optional
	// +kubebuilder:validation:XIntOrString
	Partition *intstr.IntOrString `json:"partition,omitempty"`
}

// PodTemplateSpec describes the data a pod should have when created from a template
type PodTemplateSpec struct {
	// Refer to Kubernetes API documentation for fields of `metadata`.
	// +optional
	Metadata *Metadata `json:"metadata,omitempty"`

	// Specification of the desired behavior of the pod.
	Spec corev1.PodSpec `json:"spec"`
}

// Metadata is a simplified version of ObjectMeta in Kubernetes.
type Metadata struct {
	// Map of string keys and values that can be used to organize and categorize
	// (scope and select) objects.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations is an unstructured key value map stored with a resource that may be
	// set by external tools to store and retrieve arbitrary metadata.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// TopologySpreadConstraint defines the topology spread constraint. It counts ServingGroups,
// not pods.
type TopologySpreadConstraint struct {
	// MaxSkew describes the degree to which ServingGroup may be unevenly distributed.
	// +kubebuilder:validation:Minimum=1
	MaxSkew int32 `json:"maxSkew"`

	// TopologyKey is the key of node labels. Nodes that have a label with this key
	// and identical values are considered to be in the same topology.
	// +kubebuilder:validation:MinLength=1
	TopologyKey string `json:"topologyKey"`

	// WhenUnsatisfiable indicates how to deal with an ServingGroup if it doesn't satisfy
	// the spread constraint.
	// +optional
	// +kubebuilder:validation:Enum=DoNotSchedule;ScheduleAnyway
	WhenUnsatisfiable corev1.UnsatisfiableConstraintAction `json:"whenUnsatisfiable,omitempty"`

	// LabelSelector is used to find matching ServingGroups.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// ModelServing condition types.
const (
	// ModelServingAvailable is true when every ServingGroup the spec asks for is ready.
	ModelServingAvailable = "Available"
	// ModelServingProgressing is true while groups are being created or are not yet ready.
	ModelServingProgressing = "Progressing"
	// ModelServingUpdateInProgress is true while groups run an outdated revision.
	ModelServingUpdateInProgress = "UpdateInProgress"
	// ModelServingPluginsAccepted is false while spec.plugins names a plugin the controller
	// does not have, or a config it cannot read; no pod is created meanwhile.
	ModelServingPluginsAccepted = "PluginsAccepted"
)

// ModelServingStatus defines the observed state of ModelServing
type ModelServingStatus struct {
	// observedGeneration is the most recent generation observed for ModelServing. It corresponds to the
	// ModelServing's generation, which is updated on mutation by the API Server.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas track the total number of ServingGroup that have been created (updated or not, ready or not)
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// CurrentReplicas is the number of ServingGroup created by the ModelServing controller from the ModelServing version
	// +optional
	CurrentReplicas int32 `json:"currentReplicas,omitempty"`

	// UpdatedReplicas track the number of ServingGroup that have been updated (ready or not).
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`

	// AvailableReplicas track the number of ServingGroup that are in ready state (updated or not).
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`

	// CurrentRevision is the ControllerRevision of the ServingGroups not yet updated.
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`

	// UpdateRevision is the ControllerRevision the current spec produces.
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`

	// LabelSelector selects the pods of this ModelServing; the scale subresource reports it
	// so that HPA and KEDA can find them.
	// +optional
	LabelSelector string `json:"labelSelector,omitempty"`

	// Conditions track the condition of the ModelServing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ModelServing is the Schema for the LLM Serving API
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=ms
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.labelSelector
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`,description="ServingGroups asked for"
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.replicas`,description="ServingGroups that exist"
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedReplicas`,description="ServingGroups on the latest revision"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`,description="ServingGroups that are ready"
// +kubebuilder:printcolumn:name="Scheduler",type=string,JSONPath=`.spec.schedulerName`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ModelServing struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ModelServingSpec   `json:"spec,omitempty"`
	Status ModelServingStatus `json:"status,omitempty"`
}

// ModelServingList contains a list of ModelServing
//
// +kubebuilder:object:root=true
type ModelServingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelServing `json:"items"`
}
