package gang

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

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

// decodeArgs applies defaults and validates.
func decodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	if obj != nil {
		if typed, ok := obj.(*Args); ok {
			args = typed.DeepCopyObject().(*Args)
		} else if err := frameworkruntime.DecodeInto(obj, args); err != nil {
			return nil, fmt.Errorf("gang args: %w", err)
		}
	}
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
	if *args.PermitWaitingTimeSeconds <= 0 {
		return nil, fmt.Errorf("gang args: permitWaitingTimeSeconds must be positive, got %d", *args.PermitWaitingTimeSeconds)
	}
	if *args.BackoffSeconds < 0 {
		return nil, fmt.Errorf("gang args: backoffSeconds must not be negative, got %d", *args.BackoffSeconds)
	}
	return args, nil
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
