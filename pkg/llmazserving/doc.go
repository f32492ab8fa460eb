// Package llmazserving runs llmaz's kinds on Berth. A Playground becomes an llmaz Service
// (as llmaz's own controller builds it from the OpenModels and the BackendRuntime it names),
// plus a ModelServer and a ModelRoute so berth-router serves it by model name and, with an
// elasticConfig, an autoscaling/v2 HorizontalPodAutoscaler on the Playground's scale
// subresource. A Service becomes a ModelServing placed by berth-scheduler: the
// LeaderWorkerSet template's leader is the entry pod and its workers the workers. Nothing
// here creates pods. docs/llmaz.md says what maps to what.
//
// objects.go holds the pure translation; playground.go, service.go and backendruntime.go
// the reconcilers.
package llmazserving
