// Package modelbooster runs Kthena's ModelBooster on Berth: one model served by one or more
// backends (the spec's spec.backends, or Kthena 1.0's single spec.backend, read as a list of
// one through Backends) compiles into a ModelServing per backend (placed by berth-scheduler), a
// ModelServer per backend and one ModelRoute (read by berth-router), and AutoscalingPolicies
// with their bindings (read by the autoscaler). The reconciler keeps those objects in step
// with the spec, deletes the ones the spec no longer asks for, loads LoRA adapters into the
// Ready engines and derives the ModelBooster's status. Nothing here creates pods.
// docs/modelbooster.md says what maps to what.
//
// objects.go, engine.go and validation.go hold the pure translation; reconciler.go the
// reconciler and what it watches, apply.go the create/update/delete of generated objects,
// status.go the conditions, events.go the events, lora.go the engines' LoRA API.
package modelbooster
