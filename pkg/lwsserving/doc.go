// Package lwsserving runs LeaderWorkerSets (sigs.k8s.io/lws) on Berth without LWS's own
// controller, as Kthena 0.3+ does: a LeaderWorkerSet whose pod templates name
// berth-scheduler becomes a ModelServing it owns, with one role "default" whose entry pod is
// the leader template (the worker template when there is none) and whose size − 1 workers are
// the worker template. berth-controller's ModelServing reconciler then makes the PodGroups
// and pods (berth-scheduler places each group as a gang), and the built-in plugin
// lws-standard-labels gives the pods LeaderWorkerSet's labels. The ModelServing's status is
// mirrored into the LeaderWorkerSet's, so kubectl get lws, its scale subresource and an HPA
// on it work. A LeaderWorkerSet that names another scheduler is left to LWS's controller.
//
// objects.go holds the pure translation, reconciler.go the reconciler. docs/compatibility.md
// says what maps to what and what is ignored.
package lwsserving
