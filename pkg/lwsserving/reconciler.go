package lwsserving

import (
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	lws "sigs.k8s.io/lws/api/leaderworkerset/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// RBAC: LeaderWorkerSets are read and their status written; each becomes a ModelServing
// (its owner reference blocks the LeaderWorkerSet's deletion until the ModelServing is gone,
// which clusters enforcing owner-reference permissions check against leaderworkersets/finalizers);
// a leader StatefulSet of the LeaderWorkerSet's name is read to see whether LWS's own
// controller runs it.
//
// +kubebuilder:rbac:groups=leaderworkerset.x-k8s.io,resources=leaderworkersets,verbs=get;list;watch
// +kubebuilder:rbac:groups=leaderworkerset.x-k8s.io,resources=leaderworkersets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=leaderworkerset.x-k8s.io,resources=leaderworkersets/finalizers,verbs=update
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get

// Reasons of the events the reconciler records besides a problem's (Reason* in objects.go).
const (
	// ReasonCreated and ReasonUpdated: the ModelServing was created, or brought in line.
	ReasonCreated = "Created"
	ReasonUpdated = "Updated"
	// ReasonIgnored: fields the ModelServing does not express (Ignored).
	ReasonIgnored = "Ignored"
	// ReasonReleased: the LeaderWorkerSet no longer names berth-scheduler; its ModelServing
	// was deleted.
	ReasonReleased = "Released"
	// ReasonRunElsewhere: another controller runs the LeaderWorkerSet; Berth leaves it alone.
	ReasonRunElsewhere = "RunByAnotherController"
)

// Reconciler runs LeaderWorkerSets that name berth-scheduler as ModelServings.
type Reconciler struct {
	Client client.Client
	// APIReader reads what is not cached: the leader StatefulSet LWS's controller would make.
	APIReader client.Reader
	Recorder  events.EventRecorder
}

// SetupWithManager watches LeaderWorkerSets and the ModelServings they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("leaderworkerset").
		For(&lws.LeaderWorkerSet{}).
		Owns(&workloadv1alpha1.ModelServing{}).
		Complete(r)
}

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var l lws.LeaderWorkerSet
	if err := r.Client.Get(ctx, req.NamespacedName, &l); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("leaderworkerset", klog.KObj(&l)))
	if !l.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the garbage collector removes its ModelServing
	}
	if Claimed(&l) == Others {
		return ctrl.Result{}, r.release(ctx, &l)
	}
	if who, err := r.runElsewhere(ctx, &l); err != nil || who != "" {
		if who != "" {
			// No status write: the other controller writes it, and two writers would fight.
			r.Recorder.Eventf(&l, nil, corev1.EventTypeWarning, ReasonRunElsewhere, "Sync",
				"%s; Berth leaves this LeaderWorkerSet alone (docs/compatibility.md)", who)
			log.FromContext(ctx).Info("run by another controller", "by", who)
		}
		return ctrl.Result{}, err
	}

	status := l.Status.DeepCopy()
	ms, err := r.sync(ctx, &l)
	var p *Problem
	switch {
	case errors.As(err, &p):
		if c := meta.FindStatusCondition(l.Status.Conditions, string(lws.LeaderWorkerSetAvailable)); c == nil || c.Reason != p.Reason || c.Message != p.Message {
			r.Recorder.Eventf(&l, nil, corev1.EventTypeWarning, p.Reason, "Sync", "%s", p.Message)
		}
		log.FromContext(ctx).Info("not run", "reason", p.Reason, "message", p.Message)
		setProblem(status, l.Generation, p)
	case err != nil:
		return ctrl.Result{}, err
	default:
		MirrorStatus(&l, ms, status)
	}
	if !equality.Semantic.DeepEqual(&l.Status, status) {
		// An update with the resourceVersion read: a conflict is retried with a fresh copy.
		l.Status = *status
		if err := r.Client.Status().Update(ctx, &l); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	return ctrl.Result{}, nil
}

// sync creates the LeaderWorkerSet's ModelServing, or brings it in line, and returns it.
func (r *Reconciler) sync(ctx context.Context, l *lws.LeaderWorkerSet) (*workloadv1alpha1.ModelServing, error) {
	if p := Validate(l); p != nil {
		return nil, p
	}
	want := BuildModelServing(l)
	var live workloadv1alpha1.ModelServing
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &live)
	if apierrors.IsNotFound(err) {
		if err := controllerutil.SetControllerReference(l, want, r.Client.Scheme()); err != nil {
			return nil, err
		}
		if err := r.Client.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return want, nil // the cache lags behind a create; the next pass sees it
			}
			return nil, fmt.Errorf("create ModelServing %s: %w", want.Name, err)
		}
		r.Recorder.Eventf(l, want, corev1.EventTypeNormal, ReasonCreated, "Create", "created ModelServing %s: %d groups of %d pods on %s",
			want.Name, *want.Spec.Replicas, 1+want.Spec.Template.Roles[0].WorkerReplicas, workloadv1alpha1.BerthSchedulerName)
		r.warnIgnored(l)
		return want, nil
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(&live, l) {
		return nil, &Problem{ReasonNameConflict, fmt.Sprintf("ModelServing %s already exists and is not controlled by this LeaderWorkerSet: rename one of them", live.Name)}
	}
	changed := false
	for k, v := range want.Labels {
		if live.Labels[k] != v {
			metav1.SetMetaDataLabel(&live.ObjectMeta, k, v)
			changed = true
		}
	}
	for k, v := range want.Annotations {
		if live.Annotations[k] != v {
			metav1.SetMetaDataAnnotation(&live.ObjectMeta, k, v)
			changed = true
		}
	}
	// The live spec holds the apiserver's defaults, which want leaves empty.
	if !equality.Semantic.DeepDerivative(want.Spec, live.Spec) {
		live.Spec = want.Spec
		changed = true
	}
	if !changed {
		return &live, nil
	}
	if err := r.Client.Update(ctx, &live); err != nil {
		return nil, fmt.Errorf("update ModelServing %s: %w", live.Name, err)
	}
	r.Recorder.Eventf(l, &live, corev1.EventTypeNormal, ReasonUpdated, "Update", "updated ModelServing %s: %d groups of %d pods",
		live.Name, *live.Spec.Replicas, 1+live.Spec.Template.Roles[0].WorkerReplicas)
	r.warnIgnored(l)
	return &live, nil
}

func (r *Reconciler) warnIgnored(l *lws.LeaderWorkerSet) {
	if ignored := Ignored(l); len(ignored) > 0 {
		r.Recorder.Eventf(l, nil, corev1.EventTypeWarning, ReasonIgnored, "Sync", "not supported by Berth, ignored: %s", strings.Join(ignored, "; "))
	}
}

// runElsewhere names the controller that already runs the LeaderWorkerSet, if one does:
// LWS's own (its leader StatefulSet, named like the LeaderWorkerSet and controlled by it) or
// Kthena's (a ModelServing the LeaderWorkerSet controls that does not name berth-scheduler;
// Berth's always does).
func (r *Reconciler) runElsewhere(ctx context.Context, l *lws.LeaderWorkerSet) (string, error) {
	var sts appsv1.StatefulSet
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(l), &sts)
	switch {
	case err == nil && metav1.IsControlledBy(&sts, l):
		return fmt.Sprintf("LeaderWorkerSet's controller runs it (StatefulSet %s)", sts.Name), nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", err
	}
	var ms workloadv1alpha1.ModelServing
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(l), &ms)
	switch {
	case err == nil && metav1.IsControlledBy(&ms, l) && ms.Spec.SchedulerName != workloadv1alpha1.BerthSchedulerName:
		return fmt.Sprintf("another controller (Kthena's) runs it as ModelServing %s, on scheduler %q", ms.Name, ms.Spec.SchedulerName), nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", err
	}
	return "", nil
}

// release deletes the ModelServing Berth made for a LeaderWorkerSet that no longer names
// berth-scheduler, so its pods do not run beside those of the controller it now asks for.
func (r *Reconciler) release(ctx context.Context, l *lws.LeaderWorkerSet) error {
	var ms workloadv1alpha1.ModelServing
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(l), &ms); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(&ms, l) || ms.Spec.SchedulerName != workloadv1alpha1.BerthSchedulerName ||
		ms.Annotations[workloadv1alpha1.LeaderWorkerSetCompatAnnotation] != "true" {
		return nil // not Berth's
	}
	if err := r.Client.Delete(ctx, &ms); client.IgnoreNotFound(err) != nil {
		return err
	}
	r.Recorder.Eventf(l, &ms, corev1.EventTypeNormal, ReasonReleased, "Delete",
		"deleted ModelServing %s: the pod templates no longer name %s", ms.Name, workloadv1alpha1.BerthSchedulerName)
	return nil
}
