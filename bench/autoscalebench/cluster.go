package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/kubernetes/pkg/controller/podautoscaler"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
	"k8s.io/utils/ptr"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
)

// The control plane both autoscalers act on. Each replay gets a namespace of its own with a
// Deployment named targetName as the scale target: an autoscaler writes its replicas through
// the deployments/scale subresource, the fleet follows spec.replicas (as a ReplicaSet and a
// kubelet would: a pod per replica, Running and not Ready while the model loads, Ready at its
// engine's address once it serves, deleted when scaled away). No Deployment controller runs:
// the fleet is the only thing that makes pods, so both autoscalers see the same pods.
const (
	targetName  = "server"
	targetLabel = "app"
	// clientQPS and clientBurst are every client's rate here: the HPA controller's, Berth's
	// driver's and the fleet's (one pod write per replica change; far below either).
	clientQPS   = 200
	clientBurst = 400
)

// cluster is the control plane of a whole benchmark run.
type cluster struct {
	cp     *controlplane.ControlPlane
	cfg    *rest.Config
	kube   kubernetes.Interface
	scales scale.ScalesGetter
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func startCluster(ctx context.Context) (*cluster, error) {
	// Nothing but the apiserver: no CRDs and no kube-controller-manager loops (the fleet
	// plays the ReplicaSet and the kubelet; the HPA controller is started per replay).
	cp, err := controlplane.Start(ctx, controlplane.Options{CRDDirs: []string{}, NoControllers: true})
	if err != nil {
		return nil, err
	}
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		cp.Stop()
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	// As kube-controller-manager builds the HPA's scale client.
	scales, err := scale.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(kube.Discovery()))
	if err != nil {
		cp.Stop()
		return nil, err
	}
	return &cluster{cp: cp, cfg: cfg, kube: kube, scales: scales, mapper: mapper}, nil
}

func (c *cluster) stop() { c.cp.Stop() }

var deploymentsGR = schema.GroupResource{Group: "apps", Resource: "deployments"}

// target is one replay's scale target and the pods that mirror its fleet.
type target struct {
	c  *cluster
	ns string

	ops  chan func(context.Context) // pod writes, applied in order by one goroutine
	done chan struct{}
}

// newTarget creates namespace ns with the Deployment at min replicas.
func (c *cluster) newTarget(ctx context.Context, ns string, replicas int32) (*target, error) {
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	sel := map[string]string{targetLabel: targetName}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: targetName}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: sel},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: podSpec()},
	}}
	if _, err := c.kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	t := &target{c: c, ns: ns, ops: make(chan func(context.Context), 4096), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		for op := range t.ops {
			op(context.WithoutCancel(ctx))
		}
	}()
	return t, nil
}

func podSpec() corev1.PodSpec {
	// Bound to a node nobody runs: no scheduler or kubelet touches these pods; the fleet
	// writes their status.
	return corev1.PodSpec{NodeName: "sim-node", Containers: []corev1.Container{{Name: "engine", Image: "vllm"}}}
}

// close waits for the pod writes queued so far.
func (t *target) close() {
	close(t.ops)
	<-t.done
}

// The fleet's hooks: a replica requested, serving, or gone. They queue the pod writes so the
// fleet never waits on the apiserver.

func (t *target) podAdded(name string) {
	t.ops <- func(ctx context.Context) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: name, Labels: map[string]string{targetLabel: targetName}}, Spec: podSpec()}
		p, err := t.c.kube.CoreV1().Pods(t.ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return
		}
		now := metav1.Now()
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: "ModelLoading"}}}
		_, _ = t.c.kube.CoreV1().Pods(t.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	}
}

func (t *target) podReady(name, ip string) {
	t.ops <- func(ctx context.Context) {
		p, err := t.c.kube.CoreV1().Pods(t.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return
		}
		now := metav1.Now()
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		_, _ = t.c.kube.CoreV1().Pods(t.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	}
}

func (t *target) podGone(name string) {
	t.ops <- func(ctx context.Context) {
		_ = t.c.kube.CoreV1().Pods(t.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
}

// getScale and setScale read and write the Deployment's scale subresource.
func (t *target) getScale(ctx context.Context) (*autoscalingv1.Scale, error) {
	return t.c.scales.Scales(t.ns).Get(ctx, deploymentsGR, targetName, metav1.GetOptions{})
}

func (t *target) setScale(ctx context.Context, s *autoscalingv1.Scale, replicas int32) error {
	s = s.DeepCopy()
	s.Spec.Replicas = replicas
	_, err := t.c.scales.Scales(t.ns).Update(ctx, deploymentsGR, s, metav1.UpdateOptions{})
	return err
}

// follow makes the fleet follow the Deployment's spec.replicas until ctx ends, calling
// changed with every change it applies.
func (t *target) follow(ctx context.Context, f *fleet, changed func(from, to int32)) error {
	w, err := t.c.kube.AppsV1().Deployments(t.ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", targetName).String()})
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop()
		last := int32(-1)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || d.Spec.Replicas == nil {
				continue
			}
			n := *d.Spec.Replicas
			if last >= 0 && n != last {
				changed(last, n)
				f.scaleTo(int(n), false)
			}
			last = n
		}
	}()
	return nil
}

// hpaPeer is kube-controller-manager's HorizontalPodAutoscaler controller, in this process,
// acting on one replay's target.
type hpaPeer struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startHPA creates the HorizontalPodAutoscaler for t and runs the HPA controller with sync
// period resync (real time), reading metrics through mc.
func (c *cluster) startHPA(ctx context.Context, t *target, spec autoscalingv2.HorizontalPodAutoscalerSpec, mc metricsclient.MetricsClient, resync time.Duration, tolerance float64) (*hpaPeer, error) {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: targetName}, Spec: spec}
	if _, err := c.kube.AutoscalingV2().HorizontalPodAutoscalers(t.ns).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("HorizontalPodAutoscaler: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &hpaPeer{cancel: cancel}
	factory := informers.NewSharedInformerFactoryWithOptions(c.kube, 0, informers.WithNamespace(t.ns))
	// The controller's own arguments, as kube-controller-manager passes its flags: the sync
	// period; the downscale window and tolerance of HPAs without behavior (ours has one; the
	// tolerance is the same 10% as Berth's); the CPU initialization periods at their
	// defaults (they apply to CPU only).
	hc := podautoscaler.NewHorizontalController(ctx, c.kube.CoreV1(), c.scales, c.kube.AutoscalingV2(), c.mapper, mc,
		factory.Autoscaling().V2().HorizontalPodAutoscalers(), factory.Core().V1().Pods(),
		resync, 5*time.Minute, tolerance, 5*time.Minute, 30*time.Second)
	factory.Start(ctx.Done())
	p.wg.Go(func() { hc.Run(ctx, 1) })
	return p, nil
}

func (p *hpaPeer) stop() {
	p.cancel()
	p.wg.Wait()
}

// hpaSpec is the HorizontalPodAutoscaler with the same metric, target, bounds and behavior as
// Berth's policy, its durations in real seconds (the controller runs on the wall clock).
func hpaSpec(sc scalerConfig, p berthPolicy, timeScale float64) (autoscalingv2.HorizontalPodAutoscalerSpec, error) {
	secs := func(flag string, d time.Duration, minimum int32) (int32, error) {
		real := d.Seconds() * timeScale
		n := math.Round(real)
		if math.Abs(real-n) > 0.01 || int32(n) < minimum {
			return 0, fmt.Errorf("%s %s is %.3gs real at -time-scale %g; the HPA takes whole seconds (at least %d): use a time scale that makes it one, such as 1/15 (0.0666667)", flag, d, real, timeScale, minimum)
		}
		return int32(n), nil
	}
	period, err := secs("the rate-limit period", 15*time.Second, 1)
	if err != nil {
		return autoscalingv2.HorizontalPodAutoscalerSpec{}, err
	}
	downWindow, err := secs("-berth-down-window", p.downWindow, 0)
	if err != nil {
		return autoscalingv2.HorizontalPodAutoscalerSpec{}, err
	}
	rules := func(window, instances, percent int32) *autoscalingv2.HPAScalingRules {
		return &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(window), SelectPolicy: ptr.To(autoscalingv2.MaxChangePolicySelect),
			Policies: []autoscalingv2.HPAScalingPolicy{
				{Type: autoscalingv2.PodsScalingPolicy, Value: instances, PeriodSeconds: period},
				{Type: autoscalingv2.PercentScalingPolicy, Value: percent, PeriodSeconds: period},
			}}
	}
	return autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: targetName},
		MinReplicas:    ptr.To(sc.min), MaxReplicas: sc.max,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: sc.metric},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewMilliQuantity(int64(math.Round(sc.target*1000)), resource.DecimalSI)},
		}}},
		Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
			// Berth's stable scale-up has no stabilization window; neither has the HPA's (its default).
			ScaleUp:   rules(0, p.upInstances, p.upPercent),
			ScaleDown: rules(downWindow, p.downInstances, p.downPercent),
		},
	}, nil
}

// gaugeMetrics is the HPA's metrics source: the custom metrics API, answered in this process
// by reading the same engine gauge Berth reads (podmetrics), from the same pods. It stands in
// for a custom-metrics adapter (an aggregated APIService in a cluster); what the comparison
// is about is the autoscaler, not the way the number reaches it.
type gaugeMetrics struct {
	f      *fleet
	reader *podmetrics.Reader
	port   int32
	window time.Duration
}

func (g *gaugeMetrics) GetRawMetric(metricName, _ string, _ labels.Selector, _ labels.Selector) (metricsclient.PodMetricsInfo, time.Time, error) {
	now := time.Now()
	got := g.reader.ReadGauges(context.Background(), g.f.pods(), podmetrics.Endpoint{Port: g.port, Path: "/metrics"}, []string{metricName})
	out := metricsclient.PodMetricsInfo{}
	for _, pg := range got {
		if v, ok := pg.Values[metricName]; ok && pg.Err == nil {
			out[pg.Pod.Name] = metricsclient.PodMetric{Timestamp: now, Window: g.window, Value: int64(math.Round(v * 1000))}
		}
	}
	if len(out) == 0 {
		return nil, now, fmt.Errorf("no pod reported %s", metricName)
	}
	return out, now, nil
}

func (g *gaugeMetrics) GetResourceMetric(context.Context, corev1.ResourceName, string, labels.Selector, string) (metricsclient.PodMetricsInfo, time.Time, error) {
	return nil, time.Time{}, fmt.Errorf("autoscalebench serves pod metrics only")
}

func (g *gaugeMetrics) GetObjectMetric(string, string, *autoscalingv2.CrossVersionObjectReference, labels.Selector) (int64, time.Time, error) {
	return 0, time.Time{}, fmt.Errorf("autoscalebench serves pod metrics only")
}

func (g *gaugeMetrics) GetExternalMetric(string, string, labels.Selector) ([]int64, time.Time, error) {
	return nil, time.Time{}, fmt.Errorf("autoscalebench serves pod metrics only")
}

// describeBehavior is an HPA behavior in simulated time, in one line.
func describeBehavior(spec autoscalingv2.HorizontalPodAutoscalerSpec, timeScale float64) string {
	sim := func(seconds int32) time.Duration {
		return time.Duration(math.Round(float64(seconds)/timeScale)) * time.Second
	}
	rules := func(r *autoscalingv2.HPAScalingRules, sign string) string {
		var ps []string
		for _, p := range r.Policies {
			unit := " pod(s)"
			if p.Type == autoscalingv2.PercentScalingPolicy {
				unit = "%"
			}
			ps = append(ps, fmt.Sprintf("%s%d%s per %s", sign, p.Value, unit, sim(p.PeriodSeconds)))
		}
		return fmt.Sprintf("stabilization %s, %s (selectPolicy %s)", sim(*r.StabilizationWindowSeconds), strings.Join(ps, " or "), *r.SelectPolicy)
	}
	b := spec.Behavior
	return fmt.Sprintf("scale-up %s; scale-down %s (simulated time; the HPA object holds them in real seconds)", rules(b.ScaleUp, "+"), rules(b.ScaleDown, "-"))
}
