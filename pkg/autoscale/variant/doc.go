// Package variant holds the pure algorithms behind Berth's llmd.ai/v1alpha1
// VariantAutoscaling kind: llm-d's workload-variant-autoscaler (WVA) in the
// version whose accelerator profiles carry alpha, beta and maxBatchSize. There is
// no Kubernetes client code here; a reconciler reads the objects and ConfigMaps,
// calls these functions and writes the results to status.
//
// # What llm-d does (learned from, not copied)
//
// In that WVA version (llm-d-incubation/workload-variant-autoscaler before the
// "Prefill params for TTFT modelling" change of September 2025) the controller
// turned each VariantAutoscaling into input for the "inferno" optimizer
// (github.com/llm-inferno/optimizer-light, pkg/core/allocation.go), whose queueing
// model came from github.com/llm-inferno/queue-analysis (pkg/queue, the M/M/1
// model with state-dependent service rate). The controller read the two
// ConfigMaps in internal/controller and internal/utils (CreateSystemData,
// FindModelSLO); the ConfigMap formats are in deploy/configmap-serviceclass.yaml
// and deploy/configmap-accelerator-unitcost.yaml.
//
// One replica of a variant is modelled as a single queue whose service rate
// depends on how many requests it holds. Up to N = maxBatchSize requests are
// served together as one batch; every decode step of a batch of n takes
// ITL(n) = alpha + beta*n milliseconds and advances each request in it by one
// token, so a request needs K decode steps, K being the average number of output
// tokens per request (llm-d's "avgLength"). Each request is also prefilled once,
// which takes Tp milliseconds (below). With n requests in service, over the time
// in which the batch completes n requests the engine runs K decode steps of ITL(n)
// and n prefill passes of Tp, so requests complete at rate
//
//	mu(n) = n / (K*ITL(n) + n*Tp) = 1 / (K*alpha/n + K*beta + Tp)   per millisecond;
//
// beyond N, requests wait and the rate stays mu(N). The replica holds at most 10*N
// requests (llm-d's MaxQueueToBatchRatio, counted over the whole system, batch
// included); arrivals that find it full are lost. This is a birth–death chain,
// solved for its stationary distribution p(0..10N). From it: throughput
// X = lambda*(1-p(10N)), the average batch Ls = sum of min(n,N)*p(n), the average
// number present L, the average service time Ls/X and waiting time (L-Ls)/X
// (Little's law). The average inter-token latency is the service time divided by
// K: with Tp = 0 the token-weighted mean of ITL(n), otherwise that plus the
// prefill passes that stall the batch (the request's own included, which errs on
// the safe side). The average time to first token is the wait plus Tp.
//
// # Prefill
//
// This API version gives a profile no prefill parameters, and llm-d's model of it
// had no prefill: the first output token was one of the K decode steps, and
// slo-ttft limited the queueing wait alone. Berth's issue asks for the prefill time
// from the prompt, so here it is derived from alpha and beta: a forward pass takes
// a fixed time plus a time linear in the tokens it processes. A decode step of a
// batch of n processes n tokens and takes alpha + beta*n; a prefill pass of a
// prompt of P tokens (P = average input tokens per request) processes P tokens
// and so takes
//
//	Tp = alpha + beta*P   milliseconds.
//
// Berth's engine simulator behaves this way: by default a decode step takes 8 ms
// plus 0.15 ms per sequence, and prefill about 0.1 ms per prompt token. Prefills
// are not chunked: a prefill pass stalls the whole batch, hence the n*Tp in mu(n).
// P = 0 means the prompt length is unknown; then Tp = 0 and the model is exactly
// llm-d's. (Later llm-d versions add prefill with parameters of its own, gamma and
// delta; that is not this API.)
//
// The service class's slo-ttft was handed to llm-d's optimizer as a limit on the
// queueing wait, divided by a margin ln(20) ≈ 3.0 so that, if waits were
// exponential, 95% of requests would wait less than slo-ttft. The margin is kept
// on the random wait only; the prefill is deterministic and is added as it is. So
// here a replica meets the SLO at arrival rate lambda when
//
//	average ITL <= slo-tpot   and   average wait * ln(20) + Tp <= slo-ttft
//
// where a target of 0 means "no target", as in llm-d. A profile whose Tp alone
// exceeds slo-ttft cannot serve the class at any rate.
//
// The largest such lambda is searched between 0.001 and 0.999 of the extreme
// service rates (llm-d's Delta): from 0.001*mu(1) to 0.999*mu(N). If the SLO
// fails already at the bottom the accelerator cannot serve the class at all; if it
// holds at the top the top is the answer. llm-d bisected each target separately
// and took the smaller rate; both conditions are monotone in lambda, so here one
// bisection on both at once gives the same rate (see MaxRate for the tolerance).
//
// Sizing: replicas = ceil(total rate / max rate per replica), at least the server's
// minimum (WVA always set 1); with no load, the minimum. Cost = unit cost of the
// accelerator * accCount * replicas, and the cheapest accelerator wins. WVA set
// KeepAccelerator, so when a variant already runs on an accelerator only that one
// is sized (a Deployment's accelerator is not changed by scaling); otherwise
// inferno's transition penalty orders candidates the same way as cost.
//
// Units, everywhere in this package: times in milliseconds, request rates in
// requests per minute (llm-d's arrivalRate is measured as
// rate(vllm:request_success_total[1m])*60), tokens per request, costs in the
// accelerator ConfigMap's unit per accelerator unit (llm-d's comment says cents
// per hour).
//
// # Where Berth differs from llm-d, and why
//
//   - Prefill is modelled from the prompt length with the profile's own alpha and
//     beta (see Prefill above), because Berth's issue asks for a prefill time from
//     the prompt and this API version has no prefill parameters; llm-d's version
//     of the API modelled none, and its later versions add separate parameters.
//     With the input length unknown (0) the model is llm-d's.
//   - The sloClassRef key selects the service class (as the CRD documents it);
//     llm-d's controller ignored the key and took the first class, in map order,
//     that lists the model. There is no "default/default" fallback in llm-d —
//     that is only a model name used in its samples — so there is none here.
//   - Every profile uses its own maxBatchSize (WVA applied the current
//     accelerator's value to all of them).
//   - With no load, an accelerator on which a lone request misses the SLO (ITL
//     alpha+beta, plus Tp/K, above slo-tpot, or Tp above slo-ttft) is not chosen
//     (llm-d sized zero load without checking the SLO).
//   - Traffic with an unknown output length (rate > 0, tokens = 0) is an error
//     rather than zero load, so a missing metric cannot scale a variant down.
//   - Results are deterministic: ties go to the current accelerator, then to the
//     accelerator name.
//
// # ConfigMaps
//
// Service classes: each data key holds one class as YAML, for example
//
//	premium.yaml: |
//	  name: Premium
//	  priority: 1
//	  data:
//	    - model: default/default
//	      slo-tpot: 24
//	      slo-ttft: 500
//
// with slo-tpot and slo-ttft in milliseconds and priority >= 0 (smaller is more
// important). Accelerator unit costs: each data key is an accelerator name holding
// JSON such as {"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}.
package variant
