package gang

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/plugins/pluginargs"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// WaitTimeoutAnnotation on a PodGroup overrides Args.PermitWaitingTimeSeconds for that group,
// as a Go duration ("90s", "5m").
const WaitTimeoutAnnotation = podgroups.WaitTimeoutAnnotation

// Args configure the gang plugin (pluginConfig.args in the KubeSchedulerConfiguration).
type Args struct {
	metav1.TypeMeta `json:",inline"`

	// PermitWaitingTimeSeconds is how long placed pods of an incomplete group are held in
	// Permit before the whole group is released. Default 60.
	PermitWaitingTimeSeconds *int64 `json:"permitWaitingTimeSeconds,omitempty"`

	// BackoffSeconds is how long a released group is kept out of scheduling so that
	// competing groups can complete. Default 2.
	BackoffSeconds *int64 `json:"backoffSeconds,omitempty"`

	// ReserveAfterSeconds is how long the oldest blocked group (highest priority, then
	// oldest) waits before capacity is kept for it: the nodes nearest to holding it stop
	// taking other groups' pods on what it needs, so a large gang is not starved by a
	// stream of small ones. Negative turns keeping capacity off. Default 10.
	ReserveAfterSeconds *int64 `json:"reserveAfterSeconds,omitempty"`
}

const (
	defaultWaitSeconds    = 60
	defaultBackoffSeconds = 2
	// defaultReserveAfterSeconds matches placement.DefaultReserveAfter.
	defaultReserveAfterSeconds = 10
)

// DeepCopyObject makes Args a runtime.Object, as the scheduler's config decoding wants.
func (a *Args) DeepCopyObject() runtime.Object {
	out := *a
	if a.PermitWaitingTimeSeconds != nil {
		v := *a.PermitWaitingTimeSeconds
		out.PermitWaitingTimeSeconds = &v
	}
	if a.BackoffSeconds != nil {
		v := *a.BackoffSeconds
		out.BackoffSeconds = &v
	}
	if a.ReserveAfterSeconds != nil {
		v := *a.ReserveAfterSeconds
		out.ReserveAfterSeconds = &v
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
			return nil, fmt.Errorf("gang args: %w", err)
		}
		errs = strict
	}
	setDefaults(args)
	for _, e := range validateArgs(args) {
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("gang args: %w", utilerrors.NewAggregate(errs))
	}
	return args, nil
}

func setDefaults(args *Args) {
	if args.PermitWaitingTimeSeconds == nil {
		v := int64(defaultWaitSeconds)
		args.PermitWaitingTimeSeconds = &v
	}
	if args.BackoffSeconds == nil {
		v := int64(defaultBackoffSeconds)
		args.BackoffSeconds = &v
	}
	if args.ReserveAfterSeconds == nil {
		v := int64(defaultReserveAfterSeconds)
		args.ReserveAfterSeconds = &v
	}
}

// validateArgs checks defaulted args and reports every invalid field.
func validateArgs(args *Args) field.ErrorList {
	var errs field.ErrorList
	tooLong := fmt.Sprintf("must be at most %d (seconds a duration can hold)", pluginargs.MaxSeconds)
	wait := field.NewPath("permitWaitingTimeSeconds")
	switch v := *args.PermitWaitingTimeSeconds; {
	case v <= 0:
		errs = append(errs, field.Invalid(wait, v, "must be positive"))
	case v > pluginargs.MaxSeconds:
		errs = append(errs, field.Invalid(wait, v, tooLong))
	}
	backoff := field.NewPath("backoffSeconds")
	switch v := *args.BackoffSeconds; {
	case v < 0:
		errs = append(errs, field.Invalid(backoff, v, "must not be negative"))
	case v > pluginargs.MaxSeconds:
		errs = append(errs, field.Invalid(backoff, v, tooLong))
	}
	// Any negative value turns keeping capacity off (the model checks reserveAfter >= 0), so
	// only a value no duration can hold is refused: it would wrap around to another one.
	if v := *args.ReserveAfterSeconds; v < -pluginargs.MaxSeconds || v > pluginargs.MaxSeconds {
		errs = append(errs, field.Invalid(field.NewPath("reserveAfterSeconds"), v,
			fmt.Sprintf("must be between %d and %d (negative: never keep capacity)", -pluginargs.MaxSeconds, pluginargs.MaxSeconds)))
	}
	return errs
}

// waitTimeout is the Permit wait for a group: its annotation, else the plugin default.
func (a *Args) waitTimeout(pg *volcanov1beta1.PodGroup) time.Duration {
	if v := pg.Annotations[WaitTimeoutAnnotation]; v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return time.Duration(*a.PermitWaitingTimeSeconds) * time.Second
}

func (a *Args) backoff() time.Duration { return time.Duration(*a.BackoffSeconds) * time.Second }

func (a *Args) reserveAfter() time.Duration {
	return time.Duration(*a.ReserveAfterSeconds) * time.Second
}
