package sim

import (
	"context"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// EngineOptions configure the simulated engines.
type EngineOptions struct {
	// TimeScale is every engine's real/simulated time ratio (see engine.Config).
	TimeScale float64
	// Configure, when set, adjusts each engine's configuration before it starts (tests use
	// it for small batches or caches).
	Configure func(pod *corev1.Pod, cfg *engine.Config)
	// DrainTimeout bounds how long an engine whose pod went away keeps serving its
	// in-flight requests (its pod's terminationGracePeriodSeconds when shorter).
	DrainTimeout time.Duration
}

// Engines runs a simulated inference engine for every Running pod that runs one: every pod
// of a ModelServing, and every pod a ModelServer selects (so a plain Deployment behind a
// ModelServer is served too). Each listens on its pod's IP and port, so requests reach it
// exactly as they would reach a real pod. All engines share one KV hub, the simulated
// fabric prefill/decode pairs move KV over.
type Engines struct {
	opts  EngineOptions
	cache cache.Cache
	hub   *engine.KVHub
	stale chan struct{}

	mu      sync.Mutex
	running map[string]*runningEngine // by pod namespace/name
}

type runningEngine struct {
	uid    string
	addr   string
	config engine.Config
	server *engine.Server
}

// NewEngines prepares the engines of the cluster cfg points at; call Run.
func NewEngines(cfg *rest.Config, opts EngineOptions) (*Engines, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := networkingv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, err
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	return &Engines{opts: opts, cache: c, hub: engine.NewKVHub(), stale: make(chan struct{}, 1), running: map[string]*runningEngine{}}, nil
}

// Run watches pods and ModelServers and keeps the engines matching them until ctx ends,
// then stops them all.
func (e *Engines) Run(ctx context.Context) error {
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { e.markStale() }, UpdateFunc: func(_, _ any) { e.markStale() }, DeleteFunc: func(any) { e.markStale() },
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &networkingv1alpha1.ModelServer{}} {
		inf, err := e.cache.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- e.cache.Start(ctx) }()
	e.cache.WaitForCacheSync(ctx)
	defer e.stopAll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-e.stale:
			e.sync(ctx)
		}
	}
}

func (e *Engines) markStale() {
	select {
	case e.stale <- struct{}{}:
	default:
	}
}

// Engine returns the engine of a pod, or nil (tests inject faults and read stats).
func (e *Engines) Engine(namespace, pod string) *engine.Server {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.running[namespace+"/"+pod]; r != nil {
		return r.server
	}
	return nil
}

// Hub is the KV-transfer hub every engine shares (tests read its Transfers, which outlive
// the engines of deleted pods).
func (e *Engines) Hub() *engine.KVHub { return e.hub }

// Running lists the pods (namespace/name) with a running engine, sorted.
func (e *Engines) Running() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.running))
	for k := range e.running {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Ensure starts the engine of a pod about to become Ready, when it runs one, so the engine
// listens before anything routes to the pod. The kubelet calls it before reporting Ready.
func (e *Engines) Ensure(ctx context.Context, p *corev1.Pod) {
	servers, err := e.modelServers(ctx, p.Namespace)
	if err != nil {
		return // the watch will start it
	}
	e.reconcilePod(ctx, p, servers)
}

func (e *Engines) modelServers(ctx context.Context, ns string) ([]networkingv1alpha1.ModelServer, error) {
	var list networkingv1alpha1.ModelServerList
	if err := e.cache.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (e *Engines) sync(ctx context.Context) {
	var pods corev1.PodList
	if err := e.cache.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	serversByNS := map[string][]networkingv1alpha1.ModelServer{}
	seen := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		servers, ok := serversByNS[p.Namespace]
		if !ok {
			servers, _ = e.modelServers(ctx, p.Namespace)
			serversByNS[p.Namespace] = servers
		}
		seen[p.Namespace+"/"+p.Name] = true
		e.reconcilePod(ctx, p, servers)
	}
	e.mu.Lock()
	var gone []*runningEngine
	for key, r := range e.running {
		if !seen[key] {
			gone = append(gone, r)
			delete(e.running, key)
		}
	}
	e.mu.Unlock()
	for _, r := range gone {
		go e.drain(r, e.opts.DrainTimeout)
	}
}

// reconcilePod starts, restarts or stops one pod's engine.
func (e *Engines) reconcilePod(ctx context.Context, p *corev1.Pod, servers []networkingv1alpha1.ModelServer) {
	key := p.Namespace + "/" + p.Name
	ms := selecting(p, servers)
	want, ok := engineConfig(p, ms)
	if ok {
		want.TimeScale = e.opts.TimeScale
		want.Hub = e.hub
		if e.opts.Configure != nil {
			e.opts.Configure(p, &want)
		}
	}
	addr := ""
	if ok {
		addr = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(portOf(p, ms))))
	}
	e.mu.Lock()
	cur := e.running[key]
	if cur != nil && ok && cur.uid == string(p.UID) && cur.addr == addr && sameEngine(cur.config, want) {
		e.mu.Unlock()
		return
	}
	// The kubelet starts an engine (Ensure) before the pod's new status reaches this
	// cache: a pod of the same UID seen without an IP yet is that lag, not a stop.
	if cur != nil && !ok && cur.uid == string(p.UID) && p.Status.PodIP == "" && p.DeletionTimestamp == nil {
		e.mu.Unlock()
		return
	}
	if cur != nil {
		delete(e.running, key)
	}
	var started *runningEngine
	if ok {
		srv := engine.New(want)
		if err := srv.Start(addr); err != nil {
			// Most likely the engine this one replaces still holds the address for a moment
			// (it drains in the background): try again shortly.
			klog.FromContext(ctx).Error(err, "sim engine: start; retrying", "pod", key, "addr", addr)
			time.AfterFunc(100*time.Millisecond, e.markStale)
		} else {
			started = &runningEngine{uid: string(p.UID), addr: addr, config: want, server: srv}
			e.running[key] = started
		}
	}
	e.mu.Unlock()
	if cur != nil {
		grace := e.opts.DrainTimeout
		if p.Spec.TerminationGracePeriodSeconds != nil {
			grace = min(grace, time.Duration(*p.Spec.TerminationGracePeriodSeconds)*time.Second)
		}
		go e.drain(cur, grace)
	}
}

func sameEngine(a, b engine.Config) bool {
	return a.Model == b.Model && a.Flavor == b.Flavor && a.Role == b.Role && a.ID == b.ID
}

// drain lets an engine whose pod is gone finish what it is serving, as a real engine does
// between SIGTERM and its grace period's end.
func (e *Engines) drain(r *runningEngine, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	_ = r.server.Shutdown(ctx)
}

func (e *Engines) stopAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for key, r := range e.running {
		_ = r.server.Close()
		delete(e.running, key)
	}
}

// engineConfig says whether a pod runs an engine and how it looks: a Running pod with an
// IP, of a ModelServing or selected by a ModelServer (which then decides the engine kind,
// served model and PD role).
func engineConfig(p *corev1.Pod, ms *networkingv1alpha1.ModelServer) (engine.Config, bool) {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return engine.Config{}, false
	}
	cfg := engine.Config{ID: p.Namespace + "/" + p.Name}
	_, ofServing := p.Labels[workloadv1alpha1.ModelServingNameLabel]
	if ms == nil && !ofServing {
		return cfg, false
	}
	cfg.Model = servedModel(p)
	cfg.MaxBatch = maxBatch(p)
	if strings.Contains(strings.ToLower(containerText(p)), "sglang") {
		cfg.Flavor = engine.SGLang
	}
	role := strings.ToLower(p.Labels[workloadv1alpha1.RoleLabel])
	switch {
	case strings.Contains(role, "prefill"):
		cfg.Role = engine.RolePrefill
	case strings.Contains(role, "decode"):
		cfg.Role = engine.RoleDecode
	}
	if ms != nil {
		if ms.Spec.InferenceEngine == networkingv1alpha1.SGLang {
			cfg.Flavor = engine.SGLang
		} else {
			cfg.Flavor = engine.VLLM
		}
		if ms.Spec.Model != nil && *ms.Spec.Model != "" {
			cfg.Model = *ms.Spec.Model
		}
		if pd := ms.Spec.WorkloadSelector.PDGroup; pd != nil {
			switch {
			case len(pd.PrefillLabels) > 0 && labels.SelectorFromSet(pd.PrefillLabels).Matches(labels.Set(p.Labels)):
				cfg.Role = engine.RolePrefill
			case len(pd.DecodeLabels) > 0 && labels.SelectorFromSet(pd.DecodeLabels).Matches(labels.Set(p.Labels)):
				cfg.Role = engine.RoleDecode
			}
		}
	}
	if cfg.Model == "" {
		cfg.Model = p.Labels[workloadv1alpha1.ModelServingNameLabel]
	}
	if cfg.Model == "" {
		cfg.Model = p.Name
	}
	return cfg, true
}

// selecting is the ModelServer whose workloadSelector matches the pod most specifically
// (the most labels; by name among equals). A canary's pods carry their version label too
// (Kthena 1.0's router examples: "app" for the model, "app"+"version" for each canary), so
// the canary's ModelServer, not the model-wide one, says which model their engine serves.
func selecting(p *corev1.Pod, servers []networkingv1alpha1.ModelServer) *networkingv1alpha1.ModelServer {
	var found *networkingv1alpha1.ModelServer
	for i := range servers {
		ms := &servers[i]
		if ms.Spec.WorkloadSelector == nil || !labels.SelectorFromSet(ms.Spec.WorkloadSelector.MatchLabels).Matches(labels.Set(p.Labels)) {
			continue
		}
		if found == nil {
			found = ms
			continue
		}
		n, best := len(ms.Spec.WorkloadSelector.MatchLabels), len(found.Spec.WorkloadSelector.MatchLabels)
		if n > best || n == best && ms.Name < found.Name {
			found = ms
		}
	}
	return found
}

// portOf is the selecting ModelServer's workloadPort, else the pod's first TCP container
// port, else 8000 (the router resolves endpoints the same way).
func portOf(p *corev1.Pod, ms *networkingv1alpha1.ModelServer) int32 {
	if ms != nil && ms.Spec.WorkloadPort != nil && ms.Spec.WorkloadPort.Port > 0 {
		return ms.Spec.WorkloadPort.Port
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.ContainerPort > 0 && (cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP) {
				return cp.ContainerPort
			}
		}
	}
	return 8000
}

// servedModel reads the model name from the first container's command line the way the
// engines do: --served-model-name, else --model / --model-path, else `vllm serve <model>`.
func servedModel(p *corev1.Pod) string {
	if v := engineFlag(p, "--served-model-name"); v != "" {
		return v
	}
	if v := engineFlag(p, "--model", "--model-path"); v != "" {
		return v
	}
	words := commandWords(p)
	for i, w := range words {
		if w == "serve" && i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
			return strings.Trim(words[i+1], `"'`)
		}
	}
	return ""
}

// maxBatch is the engine's batch limit from its command line: vLLM's --max-num-seqs or
// SGLang's --max-running-requests (0: the simulator's default).
func maxBatch(p *corev1.Pod) int {
	n, err := strconv.Atoi(engineFlag(p, "--max-num-seqs", "--max-running-requests"))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// commandWords is the first container's command and args split into words
// ("sh -c 'vllm serve x'" style included).
func commandWords(p *corev1.Pod) []string {
	if len(p.Spec.Containers) == 0 {
		return nil
	}
	c := p.Spec.Containers[0]
	var words []string
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		words = append(words, strings.Fields(a)...)
	}
	return words
}

// engineFlag is the value of the first of names on the first container's command line
// (--flag value or --flag=value), "" when absent.
func engineFlag(p *corev1.Pod, names ...string) string {
	words := commandWords(p)
	for i, w := range words {
		for _, n := range names {
			if v, ok := strings.CutPrefix(w, n+"="); ok {
				return strings.Trim(v, `"'`)
			}
			if w == n && i+1 < len(words) {
				return strings.Trim(words[i+1], `"'`)
			}
		}
	}
	return ""
}

func containerText(p *corev1.Pod) string {
	var b strings.Builder
	for _, c := range p.Spec.Containers {
		b.WriteString(c.Image)
		b.WriteByte(' ')
		b.WriteString(strings.Join(c.Command, " "))
		b.WriteByte(' ')
		b.WriteString(strings.Join(c.Args, " "))
	}
	return b.String()
}
