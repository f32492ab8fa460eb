package epp

import (
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Health answers grpc.health.v1 for the services the protocol names: liveness is SERVING
// from the start; readiness, the ext_proc service and "" are SERVING only while the
// picker is ready (its picture of routes, servers and endpoints synced, and not stopping).
type Health struct{ *health.Server }

// NewHealth starts not ready.
func NewHealth() *Health {
	h := &Health{health.NewServer()}
	h.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	h.SetReady(false)
	return h
}

// SetReady switches readiness, the ext_proc service and the server as a whole.
func (h *Health) SetReady(ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, svc := range []string{"", ReadinessService, ExtProcService} {
		h.SetServingStatus(svc, st)
	}
}
