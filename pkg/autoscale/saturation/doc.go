// Package saturation is llm-d's saturation analyzer (workload-variant-autoscaler v0.5,
// internal/saturation/analyzer.go), the sizing of a VariantAutoscaling written in llm-d
// v0.5's shape and of an HPA or ScaledObject annotated llm-d.ai/managed: pure functions
// over the replicas' KV-cache usage and queue length.
//
// A replica is saturated when its KV-cache usage or its queue reaches a threshold. The
// non-saturated replicas of all the variants of one model give the model's average spare
// capacity; when that falls below a trigger the model needs one more replica, which goes
// to the cheapest variant that has no replica starting; when removing one replica would
// still leave the triggers' spare capacity on the rest, the most expensive variant above
// one replica gives one up. While any variant is between two sizes (its desired count is
// not its current count, or not every replica reports), nothing moves.
package saturation
