package topology

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/plugins/pluginargs"
)

// Args configure the topology plugin (pluginConfig.args in the KubeSchedulerConfiguration).
type Args struct {
	metav1.TypeMeta `json:",inline"`

	// NodeLabelTiers are the network tiers read from node labels when no HyperNode exists,
	// lowest tier first: tier 1 is NodeLabelTiers[0]. Default: none (HyperNodes only).
	NodeLabelTiers []fabric.LabelTier `json:"nodeLabelTiers,omitempty"`

	// RetryOtherDomainSeconds is how long a domain in which a group's attempt failed (its
	// gang was released) is tried only after every other domain. Default 60.
	RetryOtherDomainSeconds *int64 `json:"retryOtherDomainSeconds,omitempty"`
}

const defaultRetryOtherDomainSeconds = 60

// DeepCopyObject makes Args a runtime.Object, as the scheduler's config decoding wants.
func (a *Args) DeepCopyObject() runtime.Object {
	out := *a
	out.NodeLabelTiers = append([]fabric.LabelTier(nil), a.NodeLabelTiers...)
	if a.RetryOtherDomainSeconds != nil {
		v := *a.RetryOtherDomainSeconds
		out.RetryOtherDomainSeconds = &v
	}
	return &out
}

// decodeArgs decodes strictly, applies defaults and validates. Its error names every
// unknown field and every invalid one, with its path.
func decodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	var errs []error
	if typed, ok := obj.(*Args); ok {
		if typed != nil {
			args = typed.DeepCopyObject().(*Args)
		}
	} else {
		strict, err := pluginargs.Decode(obj, args)
		if err != nil {
			return nil, fmt.Errorf("topology args: %w", err)
		}
		errs = strict
	}
	if args.RetryOtherDomainSeconds == nil {
		v := int64(defaultRetryOtherDomainSeconds)
		args.RetryOtherDomainSeconds = &v
	}
	for _, e := range validateArgs(args) {
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("topology args: %w", utilerrors.NewAggregate(errs))
	}
	return args, nil
}

// validateArgs checks defaulted args and reports every invalid field.
func validateArgs(args *Args) field.ErrorList {
	var errs field.ErrorList
	retry := field.NewPath("retryOtherDomainSeconds")
	switch v := *args.RetryOtherDomainSeconds; {
	case v < 0:
		errs = append(errs, field.Invalid(retry, v, "must not be negative"))
	case v > pluginargs.MaxSeconds:
		errs = append(errs, field.Invalid(retry, v, fmt.Sprintf("must be at most %d (seconds a duration can hold)", pluginargs.MaxSeconds)))
	}
	tiers := field.NewPath("nodeLabelTiers")
	names, keys := sets.New[string](), sets.New[string]()
	for i, t := range args.NodeLabelTiers {
		name, label := tiers.Index(i).Child("name"), tiers.Index(i).Child("label")
		switch {
		case t.Name == "":
			errs = append(errs, field.Required(name, "the tier's name, for highestTierName"))
		case names.Has(t.Name):
			errs = append(errs, field.Duplicate(name, t.Name))
		}
		switch {
		case t.Label == "":
			errs = append(errs, field.Required(label, "the node label that names the node's domain at this tier"))
		case keys.Has(t.Label):
			errs = append(errs, field.Duplicate(label, t.Label))
		default:
			if msgs := validation.IsQualifiedName(t.Label); len(msgs) > 0 {
				errs = append(errs, field.Invalid(label, t.Label, "not a label key: "+strings.Join(msgs, "; ")))
			}
		}
		names.Insert(t.Name)
		keys.Insert(t.Label)
	}
	return errs
}

func (a *Args) retryOtherDomain() time.Duration {
	return time.Duration(*a.RetryOtherDomainSeconds) * time.Second
}
