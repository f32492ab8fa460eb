package autoscale

import "math"

// Sample is one metric read from a target's pods at one moment.
type Sample struct {
	// Sum is the metric summed over the ready pods that reported it (a gauge's value, a
	// counter's rate per second).
	Sum float64
	// Reported is how many ready pods reported the metric.
	Reported int
	// Missing is how many of the target's pods did not report it: not ready yet, not
	// answering, or (for a counter) seen for the first time.
	Missing int
	// External marks a value for the whole target rather than a sum over its pods: a
	// Prometheus query's result (Sum; Reported 1). It asks for ceil(Sum / target) replicas.
	External bool
}

// Average is the metric per reporting pod.
func (s Sample) Average() float64 {
	if s.Reported == 0 {
		return 0
	}
	return s.Sum / float64(s.Reported)
}

// Recommend is the replica count at which metric m would sit at its target, given current
// replicas and what the pods reported; false when no pod reported it.
//
// It is Kubernetes' HPA rule on the average per pod (desired = ceil(current × average /
// target)), with the HPA's two safeguards:
//   - tolerance: within ±tolerance of the target nothing changes, so noise does not scale;
//   - pods that did not report count against the move: when scaling up they count as idle
//     (the replicas still starting will take load), when scaling down as exactly at target
//     (a pod that cannot be read is not assumed idle). If that reverses the direction or
//     lands within tolerance, the current count stands.
//
// Replicas and pods differ for multi-pod replicas (a ServingGroup with prefill and decode
// pods); averaging per pod and multiplying by replicas keeps the ratio right as long as the
// replicas have the same shape.
//
// An External sample (a Prometheus query's value for the whole target) asks for
// ceil(value / target) replicas, unchanged while that is within ±tolerance of current. It
// can scale a target up from zero, which a pod metric cannot.
func Recommend(current int32, tolerance float64, m Metric, s Sample) (int32, bool) {
	if s.Reported == 0 || m.Target <= 0 {
		return 0, false
	}
	if s.External {
		want := max(s.Sum, 0) / m.Target
		if current > 0 && math.Abs(want/float64(current)-1) < tolerance {
			return current, true
		}
		return ceilReplicas(want), true
	}
	ratio := s.Average() / m.Target
	if s.Missing == 0 {
		if math.Abs(ratio-1) < tolerance {
			return current, true
		}
		return ceilReplicas(ratio * float64(current)), true
	}
	pods := float64(s.Reported + s.Missing)
	sum := s.Sum
	if ratio < 1 {
		sum += float64(s.Missing) * m.Target
	}
	adjusted := sum / pods / m.Target
	if math.Abs(adjusted-1) < tolerance || (ratio > 1) != (adjusted > 1) {
		return current, true
	}
	desired := ceilReplicas(adjusted * float64(current))
	if (ratio > 1 && desired < current) || (ratio < 1 && desired > current) {
		return current, true
	}
	return desired, true
}

// RecommendAll is the largest recommendation over the policy's metrics (the metric that
// needs the most replicas wins), and per metric what it asked for (-1 when unread).
func RecommendAll(current int32, p Policy, samples map[string]Sample) (int32, []int32, bool) {
	var best int32
	found := false
	per := make([]int32, len(p.Metrics))
	for i, m := range p.Metrics {
		per[i] = -1
		d, ok := Recommend(current, p.Tolerance, m, samples[m.Name])
		if !ok {
			continue
		}
		per[i] = d
		if !found || d > best {
			best, found = d, true
		}
	}
	return best, per, found
}

// ceilReplicas rounds up, forgiving float noise (2.0000000001 replicas is 2), and caps at
// the API's maximum.
func ceilReplicas(v float64) int32 {
	if math.IsNaN(v) || v <= 0 {
		return 0
	}
	v = math.Ceil(v - 1e-9)
	if v > 1_000_000 {
		return 1_000_000
	}
	return int32(v)
}
