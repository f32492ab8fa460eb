package workload

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
	"github.com/berth-sh/berth/pkg/workload/plugins"
)

// Reconciler reconciles ModelServings. It is level-triggered: every pass derives what
// should exist from the spec and what does exist from the cache, and acts on the difference.
type Reconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope scope.Mode
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// Workers is how many ModelServings are reconciled at once (0: DefaultWorkers).
	Workers int

	// created is the pods created that the cache does not show yet.
	created createdPods
}

// RBAC (manifests/controller/role.yaml is generated from these markers): the ModelServing
// reconciler reads ModelServings and writes their status; it owns pods, headless Services,
// Volcano PodGroups and ControllerRevisions, and NVIDIA ComputeDomains for the ModelServings
// annotated berth.sh/compute-domain (read uncached: the CRD is optional). deleteGroup removes a group's pods in one
// request (deletecollection). It never binds a pod or writes a node.
//
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings,verbs=get;list;watch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods;services,verbs=get;list;watch;create;delete;deletecollection
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=scheduling.volcano.sh,resources=podgroups,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=resource.nvidia.com,resources=computedomains,verbs=get;list;create;patch;delete

// DefaultWorkers is how many ModelServings are reconciled at once by default. A pass is
// bound by API round trips (a new ModelServing's first pass makes about eight in a row), not
// by CPU: at 4 a fill of 100 ModelServings created pods at 100–140 a second against
// kube-controller-manager's 200 (five Deployment and five ReplicaSet workers, each
// ReplicaSet's pods created in parallel batches), and each ModelServing's status waited
// behind every other's first pass (bench/scalebench).
const DefaultWorkers = 16

// SetupWithManager registers the reconciler and what it watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexOwned(context.Background(), mgr); err != nil {
		return err
	}
	if err := indexPodsByNode(context.Background(), mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		// ModelServings are independent of each other; several reconcile at once.
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, DefaultWorkers)}).
		For(&workloadv1alpha1.ModelServing{}).
		// The informer's add event says the cache now shows a pod a pass created.
		Owns(&corev1.Pod{}, builder.WithPredicates(predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool {
			r.created.observed(e.Object)
			return true
		}})).
		Owns(&corev1.Service{}).
		Owns(&volcanov1beta1.PodGroup{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		// A node being drained: the ModelServings with pods on it move their groups.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.modelServingsOn), builder.WithPredicates(drainStarts)).
		Complete(r)
}

// Reconcile brings one ModelServing's groups in line with its spec and writes its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	defer func() { reconcileSeconds.Observe(time.Since(start).Seconds()) }()

	ms := &workloadv1alpha1.ModelServing{}
	if err := r.Get(ctx, req.NamespacedName, ms); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: drop its series, or /metrics grows with every ModelServing ever seen.
			forgetModelServing(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	logger := log.FromContext(ctx).WithValues("modelserving", klog.KObj(ms))
	ctx = ctrl.LoggerInto(ctx, logger)
	if !r.Scope.Manages(ms) {
		// Another project's controller acts on it (--manage=berth). It may have been Berth's
		// until its schedulerName or label changed: drop its series, or /metrics keeps
		// reporting the groups Berth last saw. Berth holds nothing else on it (no finalizer).
		forgetModelServing(ms.Namespace, ms.Name)
		return ctrl.Result{}, nil
	}
	if ms.DeletionTimestamp != nil {
		// Its status is no longer kept, so its series would only go stale.
		forgetModelServing(ms.Namespace, ms.Name)
		r.created.forget(ms.UID)
		return ctrl.Result{}, nil // owner references let the garbage collector remove the rest
	}
	revision, err := r.ensureRevision(ctx, ms)
	if err != nil {
		return ctrl.Result{}, err
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ms.Namespace), client.MatchingFields{controllerUIDIndex: string(ms.UID)}); err != nil {
		return ctrl.Result{}, err
	}
	var owned []corev1.Pod
	for _, p := range pods.Items {
		if metav1.IsControlledBy(&p, ms) {
			owned = append(owned, p)
		}
	}
	groups := observeGroups(ms, owned)
	// Pods created by an earlier pass that the cache does not show yet exist all the same:
	// their group is not created again, nor their role replica recovered as lost.
	pending := r.created.pendingFor(ms.UID, func(name string) bool { return podIn(groups, name) }, time.Now())
	for _, idx := range pending {
		if groups[idx] == nil {
			groups[idx] = &servingGroup{index: idx, pods: map[string]*corev1.Pod{}}
		}
	}
	logger.V(4).Info("observed", "revision", revision, "groups", len(groups), "pods", len(owned))

	// Plugins (spec.plugins) change every pod before it is created: with one that cannot be
	// used, no pod is created (nor deleted for a rollout) until the spec is fixed.
	chain, pluginErr := plugins.NewChain(ms.Spec.Plugins)
	if pluginErr != nil {
		r.refusePlugins(ctx, ms, pluginErr)
		return ctrl.Result{}, r.writeStatus(ctx, ms, revision, groups, pluginErr, nil, nil)
	}
	// ComputeDomains (annotation berth.sh/compute-domain): with a bad value, or without the
	// CRD, no group can get its domain, so nothing is created or deleted until that changes.
	cdOn, cdErr := wantsComputeDomains(ms)
	if cdErr == nil && cdOn {
		cdErr = r.checkComputeDomainCRD(ctx, ms)
	}
	if cdErr != nil {
		var ce *computeDomainError
		if !errors.As(cdErr, &ce) {
			return ctrl.Result{}, cdErr
		}
		r.refuseComputeDomains(ctx, ms, cdErr)
		// Nothing watched says when the CRD appears: look again.
		return ctrl.Result{RequeueAfter: computeDomainRetry}, r.writeStatus(ctx, ms, revision, groups, nil, cdErr, nil)
	}
	domains := newComputeDomains(cdOn, owned)

	// Rollout: replace groups on an old revision within maxUnavailable and maxSurge
	// (ServingGroupRollingUpdate), or outdated role replicas within each role's
	// maxUnavailable (RoleRollingUpdate).
	budget := budgetFor(ms)
	remove, allowed := rolloutStep(ms, groups, revision, budget)
	if len(remove) > 0 {
		logger.V(2).Info("rollout step", "revision", revision, "replacing", groupNames(ms, remove), "allowedGroups", allowed,
			"maxUnavailable", budget.maxUnavailable, "maxSurge", budget.maxSurge, "partition", budget.partition)
	}
	for _, idx := range remove {
		if err := r.deleteGroup(ctx, ms, idx, ReasonRollingUpdate); err != nil {
			return ctrl.Result{}, err
		}
		delete(groups, idx)
	}
	// Node drains: displaced groups move whole, within the minimum of Ready groups; the
	// PodDisruptionBudget keeps evictions from taking single pods.
	if err := r.ensurePDB(ctx, ms, len(owned)); err != nil {
		return ctrl.Result{}, err
	}
	drain, err := r.drainStep(ctx, ms, groups)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, rep := range roleRolloutStep(ms, groups, revision) {
		if err := r.replaceRoleReplica(ctx, ms, revision, rep); err != nil {
			return ctrl.Result{}, err
		}
	}
	// Scale down: remove the groups that go first until the count is right (a rollout may
	// keep up to maxSurge extra groups while it runs).
	if len(groups) > allowed {
		cost := deletionCosts(groups)
		order := scaleDownOrder(ms, groups, cost)
		n := len(groups) - allowed
		for _, idx := range order[:n] {
			why := scaleDownWhy(ms, groups, cost, idx, order[n:])
			if err := r.deleteGroupBecause(ctx, ms, idx, ReasonScaledDown, why); err != nil {
				return ctrl.Result{}, err
			}
			delete(groups, idx)
		}
	}
	// Scale up (and surge): new groups take the lowest free ordinals.
	if len(groups) < allowed {
		for _, idx := range freeOrdinals(groups, allowed-len(groups)) {
			group := workloadv1alpha1.ServingGroupName(ms.Name, idx)
			logger.V(2).Info("creating ServingGroup", "group", group, "revision", revision, "groups", len(groups), "allowedGroups", allowed)
			r.Recorder.Eventf(ms, groupObject(ms, idx), corev1.EventTypeNormal, ReasonCreateGroup, actionCreate, "creating ServingGroup %s", group)
			groups[idx] = &servingGroup{index: idx, pods: map[string]*corev1.Pod{}}
		}
	}
	// Every kept group: its PodGroup, Services, every pod it should have, and recovery.
	var requeue time.Duration
	templates := newRevisionTemplates(r.Client, ms, revision)
	for _, idx := range sortedIndices(groups) {
		wait, err := r.ensureGroup(ctx, ms, revision, groups[idx], chain, templates, domains, pending)
		if err != nil {
			return ctrl.Result{}, err
		}
		if wait > 0 && (requeue == 0 || wait < requeue) {
			requeue = wait
		}
	}
	if err := r.pruneServices(ctx, ms, groups); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.prunePodGroups(ctx, ms, groups); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.pruneRevisions(ctx, ms, revision, groups); err != nil {
		return ctrl.Result{}, err
	}
	if cdOn || anyComputeDomainClaim(owned) {
		if err := r.pruneComputeDomains(ctx, ms, groups, domains); err != nil {
			return ctrl.Result{}, err
		}
	}
	if requeue > 0 {
		logger.V(4).Info("waiting out a restart grace period", "requeueAfter", requeue)
	}
	return ctrl.Result{RequeueAfter: requeue}, r.writeStatus(ctx, ms, revision, groups, nil, nil, drain)
}

// refusePlugins records, once per change of the problem, a Warning event naming the plugin
// of spec.plugins that cannot be used; the PluginsAccepted condition says it too.
func (r *Reconciler) refusePlugins(ctx context.Context, ms *workloadv1alpha1.ModelServing, err error) {
	reason, msg := pluginsRefused(err)
	log.FromContext(ctx).V(2).Info("plugins refused: no pod is created", "reason", reason, "why", msg)
	if c := meta.FindStatusCondition(ms.Status.Conditions, workloadv1alpha1.ModelServingPluginsAccepted); c != nil &&
		c.Status == metav1.ConditionFalse && c.Message == msg && c.ObservedGeneration == ms.Generation {
		return // said already
	}
	r.Recorder.Eventf(ms, nil, corev1.EventTypeWarning, reason, actionRefuse, "%s", msg)
}

// pluginsRefused is the condition reason and message for a plugin that cannot be used.
func pluginsRefused(err error) (reason, msg string) {
	var pe *plugins.Error
	if errors.As(err, &pe) {
		return pe.Reason, fmt.Sprintf("%s; no pod is created until spec.plugins is fixed", pe.Error())
	}
	return plugins.ReasonInvalidPluginConfig, err.Error()
}

// replaceRoleReplica deletes the pods of a role replica a RoleRollingUpdate replaces; it
// comes back from its role's current template once they are gone.
func (r *Reconciler) replaceRoleReplica(ctx context.Context, ms *workloadv1alpha1.ModelServing, revision string, rep roleReplacement) error {
	u := rep.unit
	group := workloadv1alpha1.ServingGroupName(ms.Name, rep.group)
	replica := workloadv1alpha1.RoleReplicaName(u.role.Name, u.replica)
	log.FromContext(ctx).V(2).Info("role rollout step", "group", group, "roleReplica", replica, "revision", revision, "pods", klog.KObjSlice(u.present))
	var related runtime.Object
	if len(u.present) > 0 {
		related = u.present[0]
	}
	r.Recorder.Eventf(ms, related, corev1.EventTypeNormal, ReasonRoleRollingUpdate, actionDelete,
		"replacing role replica %s of %s: role %s's template changed (revision %s)", replica, group, u.role.Name, revision)
	now := metav1.Now()
	for _, p := range u.present {
		if err := r.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
		// This pass's copy (listed, not the cache's) now reads as terminating, so recovery and
		// pod creation leave the replica alone until its pods are gone.
		p.DeletionTimestamp = &now
		u.dying = append(u.dying, p)
	}
	u.present = nil
	return nil
}

// groupNames names the groups of indices, for logs.
func groupNames(ms *workloadv1alpha1.ModelServing, indices []int) []string {
	out := make([]string, len(indices))
	for i, idx := range indices {
		out[i] = workloadv1alpha1.ServingGroupName(ms.Name, idx)
	}
	return out
}

func sortedIndices(groups map[int]*servingGroup) []int {
	idx := make([]int, 0, len(groups))
	for i := range groups {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx
}

// ensureGroup creates whatever of group g is missing and applies the recovery policy to
// what is broken. It returns how soon to look again when a recovery waits out its grace period.
func (r *Reconciler) ensureGroup(ctx context.Context, ms *workloadv1alpha1.ModelServing, revision string, g *servingGroup,
	chain *plugins.Chain, templates *revisionTemplates, domains *computeDomains, pending map[string]int) (time.Duration, error) {
	groupRevision := g.revision()
	if needsPodGroup(ms) {
		if err := r.ensurePodGroup(ctx, ms, g.index); err != nil {
			return 0, err
		}
	}
	logger := log.FromContext(ctx)
	group := workloadv1alpha1.ServingGroupName(ms.Name, g.index)
	units := groupUnits(ms, g)
	for _, u := range units {
		for _, name := range u.names {
			if _, ok := pending[name]; ok {
				u.pending++
			}
		}
	}
	// Pods of role replicas the spec no longer has (a role scaled down) go first.
	if extra := podsOutside(g, units); len(extra) > 0 {
		logger.V(2).Info("deleting pods of role replicas no longer in the spec", "group", group, "pods", klog.KObjSlice(extra))
		r.Recorder.Eventf(ms, groupObject(ms, g.index), corev1.EventTypeNormal, ReasonScaleRole, actionDelete, "deleting %d pods of %s: their role replicas are no longer in the spec", len(extra), group)
		for _, p := range extra {
			if err := r.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
				return 0, err
			}
			delete(g.pods, p.Name)
		}
	}
	plan := planRecovery(ms, g, units, time.Now())
	if plan.wait > 0 {
		logger.V(4).Info("recovery waits out restartGracePeriodSeconds", "group", group, "wait", plan.wait)
		return plan.wait, nil
	}
	for _, d := range plan.deletions {
		logger.V(2).Info("recovery", "group", group, "decision", d.reason, "pods", klog.KObjSlice(d.pods), "why", d.message)
		r.Recorder.Eventf(ms, deletionObject(ms, g.index, d), corev1.EventTypeWarning, d.reason, actionRecreate, "%s", d.message)
		recoveries.WithLabelValues(d.reason).Inc()
		for _, p := range d.pods {
			if err := r.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
				return 0, err
			}
		}
	}
	if len(plan.deletions) > 0 {
		if domains.on && plan.deletions[0].reason == ReasonRecreateGroup {
			// The group restarts whole: it gets a fresh domain once these pods are gone.
			if err := r.retireComputeDomain(ctx, ms, g.index); err != nil {
				return 0, err
			}
		}
		return 0, nil // recreate on a later pass, once every deleted pod is gone
	}
	if domains.on && missingPods(g, units) {
		// The domain comes first: its pods claim the channel template it names.
		if wait, err := r.ensureComputeDomain(ctx, ms, g.index, domains); err != nil || wait > 0 {
			return wait, err
		}
	}
	var missing []missingPod
	for _, u := range units {
		if u.role.WorkerReplicas > 0 {
			if err := r.ensureObject(ctx, BuildService(ms, g.index, u.role, u.replica), &corev1.Service{}); err != nil {
				return 0, err
			}
		}
		if u.terminating() {
			continue // a unit starts together: wait until its old pods are gone
		}
		rev := unitRevision(ms, g.index, u, groupRevision, revision)
		role := templates.role(ctx, rev, u.role)
		for k, name := range u.names {
			if _, ok := g.pods[name]; ok {
				continue
			}
			if _, ok := pending[name]; ok {
				continue // created by an earlier pass; the cache has not caught up
			}
			pod := BuildPod(ms, rev, g.index, role, u.replica, k)
			// The router pairs a prefill with a decode of another revision only when one
			// revision had both their templates: it learns each revision's roles from here.
			pod.Annotations[workloadv1alpha1.RevisionRolesAnnotation] = templates.revisionRoles(ctx, rev)
			if err := chain.OnPodCreate(&plugins.Pod{ModelServing: ms, Group: g.index, Role: role.Name,
				RoleID: workloadv1alpha1.RoleReplicaName(role.Name, u.replica), Worker: k, Pod: pod}); err != nil {
				return 0, err
			}
			if domains.on {
				wireComputeDomain(pod, ms.Name, g.index)
			}
			missing = append(missing, missingPod{pod: pod, rev: rev})
		}
	}
	return 0, r.createPods(ctx, ms, g, missing)
}

// missingPod is a pod of a group to create, and the revision it is built from.
type missingPod struct {
	pod *corev1.Pod
	rev string
}

// podCreators is how many of a group's pods are created at once. A gang's pods are of use
// only together (the scheduler takes none of them until its minimum exists), and one
// after the other a group of a dozen pods took a dozen API round trips: at 20 ms each
// the controller, not the scheduler, set the pace of a fill (bench/scalebench).
const podCreators = 16

// createPods creates a group's missing pods, up to podCreators at once, and records each
// one created. It returns the first error; the pods created before it stand (the next
// pass creates the rest).
func (r *Reconciler) createPods(ctx context.Context, ms *workloadv1alpha1.ModelServing, g *servingGroup, missing []missingPod) error {
	if len(missing) == 0 {
		return nil
	}
	logger := log.FromContext(ctx)
	group := workloadv1alpha1.ServingGroupName(ms.Name, g.index)
	created := make([]bool, len(missing))
	errs := make([]error, len(missing))
	var wg sync.WaitGroup
	slots := make(chan struct{}, podCreators)
	for i, m := range missing {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			err := r.Create(ctx, m.pod)
			switch {
			case apierrors.IsAlreadyExists(err):
				errs[i] = r.removeStale(ctx, ms, m.pod)
			case err != nil:
				errs[i] = fmt.Errorf("create pod %s: %w", m.pod.Name, err)
			default:
				created[i] = true
				r.created.created(ms.UID, m.pod.Name, g.index, time.Now())
			}
		})
	}
	wg.Wait()
	for i, m := range missing {
		if created[i] {
			logger.V(4).Info("created pod", "group", group, "pod", klog.KObj(m.pod), "revision", m.rev)
			g.pods[m.pod.Name] = m.pod
		}
	}
	return errors.Join(errs...)
}

// unitRevision is the revision a role replica's missing pods are created under: that of its
// live pods; under ServingGroupRollingUpdate that of its group's (a group keeps its
// revision until the rollout replaces it whole); for a replica that keeps its revision
// (below a partition) the status's currentRevision, the one not yet updated; else the
// current one.
func unitRevision(ms *workloadv1alpha1.ModelServing, group int, u *unit, groupRevision, revision string) string {
	if rev := u.revision(); rev != "" {
		return rev
	}
	if groupRevision != "" && rolloutType(ms) == workloadv1alpha1.ServingGroupRollingUpdate {
		return groupRevision
	}
	if cur := ms.Status.CurrentRevision; cur != "" && protected(ms, group, u) {
		return cur
	}
	return revision
}

// removeStale deletes a pod that has our pod's name but another owner: it belongs to a
// ModelServing of the same name that was deleted, and the garbage collector has not removed
// it yet. Waiting for the collector would stall a ModelServing recreated at once.
func (r *Reconciler) removeStale(ctx context.Context, ms *workloadv1alpha1.ModelServing, want *corev1.Pod) error {
	have := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
		return client.IgnoreNotFound(err)
	}
	if metav1.IsControlledBy(have, ms) {
		return nil // ours; the cache had not caught up
	}
	log.FromContext(ctx).V(2).Info("deleting pod left by an earlier ModelServing of this name", "pod", klog.KObj(have))
	r.Recorder.Eventf(ms, have, corev1.EventTypeNormal, ReasonDeleteStalePod, actionDelete, "deleting pod %s left by an earlier ModelServing of this name", have.Name)
	return client.IgnoreNotFound(r.Delete(ctx, have, client.Preconditions{UID: &have.UID}, client.GracePeriodSeconds(0)))
}

// ensurePodGroup creates the group's PodGroup or brings its spec in step with the ModelServing.
func (r *Reconciler) ensurePodGroup(ctx context.Context, ms *workloadv1alpha1.ModelServing, idx int) error {
	want := BuildPodGroup(ms, idx)
	have := &volcanov1beta1.PodGroup{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		log.FromContext(ctx).V(4).Info("creating PodGroup", "podGroup", klog.KObj(want), "minMember", want.Spec.MinMember)
		return r.createIfMissing(ctx, want)
	}
	if err != nil {
		return err
	}
	stale := !metav1.IsControlledBy(have, ms)
	if equalPodGroupSpec(have.Spec, want.Spec) && !stale {
		return nil
	}
	if stale {
		// Left by a deleted ModelServing of this name: adopt it rather than wait for the
		// garbage collector.
		have.OwnerReferences = want.OwnerReferences
	}
	// Keep fields another component owns (queue, priority) and replace ours.
	have.Spec.MinMember = want.Spec.MinMember
	have.Spec.MinTaskMember = want.Spec.MinTaskMember
	have.Spec.MinResources = want.Spec.MinResources
	have.Spec.NetworkTopology = want.Spec.NetworkTopology
	have.Spec.SubGroupPolicy = want.Spec.SubGroupPolicy
	log.FromContext(ctx).V(2).Info("updating PodGroup", "podGroup", klog.KObj(have), "adopted", stale, "minMember", have.Spec.MinMember)
	return r.Update(ctx, have)
}

func equalPodGroupSpec(a, b volcanov1beta1.PodGroupSpec) bool {
	ja, _ := json.Marshal([]any{a.MinMember, a.MinTaskMember, a.MinResources, a.NetworkTopology, a.SubGroupPolicy})
	jb, _ := json.Marshal([]any{b.MinMember, b.MinTaskMember, b.MinResources, b.NetworkTopology, b.SubGroupPolicy})
	return string(ja) == string(jb)
}

func (r *Reconciler) createIfMissing(ctx context.Context, obj client.Object) error {
	if err := r.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// deleteGroup removes a group's pods, Services and PodGroup.
func (r *Reconciler) deleteGroup(ctx context.Context, ms *workloadv1alpha1.ModelServing, idx int, reason string) error {
	return r.deleteGroupBecause(ctx, ms, idx, reason, "")
}

// deleteGroupBecause is deleteGroup with why the group was chosen, said in its event.
func (r *Reconciler) deleteGroupBecause(ctx context.Context, ms *workloadv1alpha1.ModelServing, idx int, reason, why string) error {
	group := workloadv1alpha1.ServingGroupName(ms.Name, idx)
	log.FromContext(ctx).V(2).Info("deleting ServingGroup", "group", group, "reason", reason, "why", why)
	if why != "" {
		r.Recorder.Eventf(ms, groupObject(ms, idx), corev1.EventTypeNormal, reason, actionDelete, "deleting ServingGroup %s: %s", group, why)
	} else {
		r.Recorder.Eventf(ms, groupObject(ms, idx), corev1.EventTypeNormal, reason, actionDelete, "deleting ServingGroup %s", group)
	}
	sel := client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms.Name, workloadv1alpha1.GroupNameLabel: group}
	if err := r.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ms.Namespace), sel); err != nil {
		return err
	}
	r.created.forgetGroup(ms.UID, idx)
	var svcs corev1.ServiceList
	if err := r.List(ctx, &svcs, client.InNamespace(ms.Namespace), sel); err != nil {
		return err
	}
	for i := range svcs.Items {
		if err := r.Delete(ctx, &svcs.Items[i]); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ms.Namespace, Name: group}}
	if err := r.Delete(ctx, pg); client.IgnoreNotFound(err) != nil {
		return err
	}
	if on, _ := wantsComputeDomains(ms); on {
		// Its ComputeDomain goes once the pods are gone (pruneComputeDomains, or
		// ensureComputeDomain when the same ordinal comes back at once).
		return r.retireComputeDomain(ctx, ms, idx)
	}
	return nil
}

// ensureRevision records the template as a ControllerRevision and returns its hash
// (templateHash).
func (r *Reconciler) ensureRevision(ctx context.Context, ms *workloadv1alpha1.ModelServing) (string, error) {
	raw, err := json.Marshal(ms.Spec.Template)
	if err != nil {
		return "", err
	}
	hash, err := templateHash(&ms.Spec.Template)
	if err != nil {
		return "", err
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ms.Namespace, Name: fmt.Sprintf("%s-%s", ms.Name, hash),
			Labels:          map[string]string{workloadv1alpha1.ModelServingNameLabel: ms.Name, workloadv1alpha1.RevisionLabel: hash},
			OwnerReferences: []metav1.OwnerReference{ownerRef(ms)},
		},
		Data:     runtime.RawExtension{Raw: raw},
		Revision: ms.Generation,
	}
	return hash, r.ensureObject(ctx, cr, &appsv1.ControllerRevision{})
}

// ensureObject creates want unless the cache already has it: every reconcile passes here,
// and a create that fails with AlreadyExists still costs the apiserver a request.
func (r *Reconciler) ensureObject(ctx context.Context, want, scratch client.Object) error {
	err := r.Get(ctx, client.ObjectKeyFromObject(want), scratch)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	return r.createIfMissing(ctx, want)
}

// revisionHistoryLimit is how many unused ControllerRevisions a ModelServing keeps.
const revisionHistoryLimit = 10

// pruneRevisions deletes the oldest ControllerRevisions no group runs, beyond the limit.
func (r *Reconciler) pruneRevisions(ctx context.Context, ms *workloadv1alpha1.ModelServing, revision string, groups map[int]*servingGroup) error {
	var list appsv1.ControllerRevisionList
	if err := r.List(ctx, &list, client.InNamespace(ms.Namespace), client.MatchingFields{controllerUIDIndex: string(ms.UID)}); err != nil {
		return err
	}
	// The current revision too: a replica below a partition that is rebuilt comes back from it.
	inUse := map[string]bool{revision: true, ms.Status.CurrentRevision: true}
	for _, g := range groups {
		for _, p := range g.pods {
			inUse[p.Labels[workloadv1alpha1.RevisionLabel]] = true
		}
	}
	var unused []*appsv1.ControllerRevision
	for i := range list.Items {
		cr := &list.Items[i]
		if metav1.IsControlledBy(cr, ms) && !inUse[cr.Labels[workloadv1alpha1.RevisionLabel]] {
			unused = append(unused, cr)
		}
	}
	if len(unused) <= revisionHistoryLimit {
		return nil
	}
	sort.Slice(unused, func(i, j int) bool { return unused[i].CreationTimestamp.Before(&unused[j].CreationTimestamp) })
	for _, cr := range unused[:len(unused)-revisionHistoryLimit] {
		if err := r.Delete(ctx, cr); client.IgnoreNotFound(err) != nil {
			return err
		}
		log.FromContext(ctx).V(4).Info("deleted unused ControllerRevision", "controllerRevision", klog.KObj(cr))
	}
	return nil
}

// writeStatus derives the status from the groups and writes it when it changed.
//
// Which groups count as updated is groupUpdated's rule. pluginErr, when not nil, is why spec.plugins is refused (condition PluginsAccepted);
// cdErr why the ComputeDomain annotation cannot be honoured (condition ComputeDomainsReady);
// drain what the drain step found (condition DisruptionAllowed; nil leaves it as it is).
func (r *Reconciler) writeStatus(ctx context.Context, ms *workloadv1alpha1.ModelServing, revision string, groups map[int]*servingGroup, pluginErr, cdErr error, drain *drainReport) error {
	want := int32(ptr.Deref(ms.Spec.Replicas, 1))
	st := ms.Status.DeepCopy()
	st.ObservedGeneration = ms.Generation
	st.Replicas = int32(len(groups))
	st.UpdatedReplicas, st.AvailableReplicas, st.CurrentReplicas = 0, 0, 0
	hashes := roleHashes(ms)
	for _, g := range groups {
		if groupUpdated(ms, g, revision, hashes) {
			st.UpdatedReplicas++
		} else {
			st.CurrentReplicas++
		}
		if g.ready(ms) {
			st.AvailableReplicas++
		}
	}
	if st.CurrentReplicas == 0 {
		st.CurrentReplicas = st.UpdatedReplicas
		st.CurrentRevision = revision
	}
	st.UpdateRevision = revision
	st.LabelSelector = workloadv1alpha1.ScaleSelector(ms)
	setPluginsCondition(st, ms, pluginErr)
	if pluginErr == nil { // refused plugins stop the pass before the annotation is read
		setComputeDomainsCondition(st, ms, cdErr)
	}
	r.setDrainCondition(st, ms, drain)

	setCondition(st, workloadv1alpha1.ModelServingAvailable, st.AvailableReplicas >= want,
		"AllGroupsReady", fmt.Sprintf("%d/%d ServingGroups ready", st.AvailableReplicas, want),
		"GroupsNotReady", fmt.Sprintf("%d/%d ServingGroups ready", st.AvailableReplicas, want), ms.Generation)
	setCondition(st, workloadv1alpha1.ModelServingProgressing, st.AvailableReplicas < want || st.Replicas != want,
		"GroupsStarting", fmt.Sprintf("%d of %d ServingGroups are not ready yet", want-min(want, st.AvailableReplicas), want),
		"Stable", "every ServingGroup is ready", ms.Generation)
	setCondition(st, workloadv1alpha1.ModelServingUpdateInProgress, st.UpdatedReplicas < st.Replicas,
		"RollingUpdate", fmt.Sprintf("%d/%d ServingGroups on revision %s", st.UpdatedReplicas, st.Replicas, revision),
		"UpToDate", fmt.Sprintf("every ServingGroup is on revision %s", revision), ms.Generation)

	groupsByState.WithLabelValues(ms.Namespace, ms.Name, "available").Set(float64(st.AvailableReplicas))
	groupsByState.WithLabelValues(ms.Namespace, ms.Name, "unavailable").Set(float64(st.Replicas - st.AvailableReplicas))

	if equalStatus(&ms.Status, st) {
		return nil
	}
	log.FromContext(ctx).V(4).Info("writing status", "replicas", st.Replicas, "available", st.AvailableReplicas,
		"updated", st.UpdatedReplicas, "current", st.CurrentReplicas, "updateRevision", revision)
	// A full update with the object's resourceVersion: a merge patch computed against a
	// stale cached copy would leave fields the cache had not seen yet, mixing two passes'
	// counts. A conflict means a newer pass is due anyway.
	ms.Status = *st
	if err := r.Status().Update(ctx, ms); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

// setPluginsCondition says whether spec.plugins is usable; a ModelServing without plugins
// has no such condition.
func setPluginsCondition(st *workloadv1alpha1.ModelServingStatus, ms *workloadv1alpha1.ModelServing, pluginErr error) {
	if len(ms.Spec.Plugins) == 0 {
		meta.RemoveStatusCondition(&st.Conditions, workloadv1alpha1.ModelServingPluginsAccepted)
		return
	}
	c := metav1.Condition{Type: workloadv1alpha1.ModelServingPluginsAccepted, ObservedGeneration: ms.Generation}
	if pluginErr != nil {
		c.Status = metav1.ConditionFalse
		c.Reason, c.Message = pluginsRefused(pluginErr)
	} else {
		names := make([]string, len(ms.Spec.Plugins))
		for i, p := range ms.Spec.Plugins {
			names[i] = p.Name
		}
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "Accepted", "plugins applied to every new pod, in order: "+strings.Join(names, ", ")
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

func setCondition(st *workloadv1alpha1.ModelServingStatus, typ string, ok bool, trueReason, trueMsg, falseReason, falseMsg string, gen int64) {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: falseReason, Message: falseMsg, ObservedGeneration: gen}
	if ok {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, trueReason, trueMsg
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

func equalStatus(a, b *workloadv1alpha1.ModelServingStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
