package topology

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// Args configure the topology plugin (pluginConfig.args in the KubeSchedulerConfiguration).
type Args struct {
	metav1.TypeMeta `json:",inline"`

	// NodeLabelTiers are the network tiers read from node labels when no HyperNode exists,
	// lowest tier first: tier 1 is NodeLabelTiers[0]. Default: none (HyperNodes only).
	NodeLabelTiers []LabelTier `json:"nodeLabelTiers,omitempty"`

	// RetryOtherDomainSeconds is how long a domain in which a group's attempt failed (its
	// gang was released) is tried only after every other domain. Default 60.
	RetryOtherDomainSeconds *int64 `json:"retryOtherDomainSeconds,omitempty"`
}

const defaultRetryOtherDomainSeconds = 60

// DeepCopyObject makes Args a runtime.Object, as the scheduler's config decoding wants.
func (a *Args) DeepCopyObject() runtime.Object {
	out := *a
	out.NodeLabelTiers = append([]LabelTier(nil), a.NodeLabelTiers...)
	if a.RetryOtherDomainSeconds != nil {
		v := *a.RetryOtherDomainSeconds
		out.RetryOtherDomainSeconds = &v
	}
	return &out
}

// decodeArgs applies defaults and validates; errors name the field.
func decodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	if obj != nil {
		if typed, ok := obj.(*Args); ok {
			args = typed.DeepCopyObject().(*Args)
		} else if err := frameworkruntime.DecodeInto(obj, args); err != nil {
			return nil, fmt.Errorf("topology args: %w", err)
		}
	}
	if args.RetryOtherDomainSeconds == nil {
		v := int64(defaultRetryOtherDomainSeconds)
		args.RetryOtherDomainSeconds = &v
	}
	if *args.RetryOtherDomainSeconds < 0 {
		return nil, fmt.Errorf("topology args: retryOtherDomainSeconds must not be negative, got %d", *args.RetryOtherDomainSeconds)
	}
	names, keys := map[string]bool{}, map[string]bool{}
	for i, t := range args.NodeLabelTiers {
		if t.Name == "" {
			return nil, fmt.Errorf("topology args: nodeLabelTiers[%d].name must not be empty", i)
		}
		if errs := validation.IsQualifiedName(t.Label); len(errs) > 0 {
			return nil, fmt.Errorf("topology args: nodeLabelTiers[%d].label %q is not a label key: %v", i, t.Label, errs)
		}
		if names[t.Name] || keys[t.Label] {
			return nil, fmt.Errorf("topology args: nodeLabelTiers[%d] repeats name %q or label %q", i, t.Name, t.Label)
		}
		names[t.Name], keys[t.Label] = true, true
	}
	return args, nil
}

func (a *Args) retryOtherDomain() time.Duration {
	return time.Duration(*a.RetryOtherDomainSeconds) * time.Second
}
