// Package chaos runs the whole system as it ships (two replicas each of berth-scheduler,
// berth-controller and berth-router, each a separate process) while a seeded random stream
// creates, scales, rolls and fails ModelServings on two node pools and clients send requests
// through the routers, and repeatedly SIGKILLs the scheduler and controller leaders, a router
// replica and simulated nodes at random points, restarting each. Watches check the
// invariants for the whole run; at the end everything must settle Available with nothing
// orphaned and no client request lost.
//
// `make test` runs a bounded form (-chaos.duration, 40s of chaos); a longer one:
//
//	go test ./test/integration/chaos -chaos.duration=10m -timeout 30m -v
//
// A failure prints its seed; -chaos.seed replays the same stream of actions (timings differ).
package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/internal/replicas"
	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/sim"
)

var (
	chaosDuration = flag.Duration("chaos.duration", 40*time.Second, "how long the chaos lasts")
	chaosSeed     = flag.Int64("chaos.seed", 0, "seed of the action stream (0: the clock)")
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	replicas.RunIfReplica()
	ctrl.SetLogger(klog.NewKlogr())
	cptest.Main(m, &cp)
}

const (
	ns        = "chaos"
	poolLabel = "pool"
	gpusNode  = 8
	gpu       = corev1.ResourceName("nvidia.com/gpu")
)

// fleet is the running replicas of each component; killed ones are replaced.
type fleet struct {
	t       *testing.T
	mu      sync.Mutex
	byRole  map[string][]*replicas.Replica
	started map[string]int
	kills   map[string]int
}

func (f *fleet) start(role, addr string) *replicas.Replica {
	f.mu.Lock()
	n := f.started[role]
	f.started[role]++
	f.mu.Unlock()
	r := replicas.Start(f.t, cp, role, fmt.Sprintf("%s-%d", role, n), addr)
	f.mu.Lock()
	f.byRole[role] = append(f.byRole[role], r)
	f.mu.Unlock()
	return r
}

// alive is the replicas of role the test has not killed.
func (f *fleet) alive(role string) []*replicas.Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*replicas.Replica
	for _, r := range f.byRole[role] {
		if !r.Killed() {
			out = append(out, r)
		}
	}
	return out
}

// killLeader kills the replica of role that leads (the first to have led among the living
// is the leader: a standby leads only after the leader is gone) and starts a replacement
// after a pause.
func (f *fleet) killLeader(role string, pause time.Duration) {
	alive := f.alive(role)
	var lead *replicas.Replica
	for _, r := range alive {
		select {
		case <-r.Leading():
			lead = r
		default:
		}
	}
	if lead == nil {
		return // an election is under way; try again later
	}
	lead.Kill()
	f.mu.Lock()
	f.kills[role]++
	f.mu.Unlock()
	f.t.Logf("chaos: killed %s (the leader)", lead.Name)
	time.AfterFunc(pause, func() { f.start(role, "") })
}

// diedOnTheirOwn lists replicas that exited without being killed.
func (f *fleet) diedOnTheirOwn() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, rs := range f.byRole {
		for _, r := range rs {
			if r.DiedOnItsOwn() {
				out = append(out, r.Name)
			}
		}
	}
	return out
}

// freeAddr is a loopback address nothing listens on (for a router replica).
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// routerSlot is one router replica's address, and whether it is down (killed, not yet back).
type routerSlot struct {
	addr string
	down atomic.Bool
	gen  atomic.Int64 // bumped at every kill: requests in flight across a bump were on a killed replica
}

func TestChaos(t *testing.T) {
	seed := *chaosSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -chaos.seed=%d), chaos for %s", seed, seed, *chaosDuration)
	rng := rand.New(rand.NewPCG(uint64(seed), 3))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000
	kube := kubernetes.NewForConfigOrDie(cfg)
	cl, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)

	// The kubelet and engines stay up (they are the machines, not Berth); nodes come and go.
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	machines, err := inprocess.Start(ctx, cfg, inprocess.Options{Kubelet: &inprocess.KubeletOptions{
		PodStartDelay: 100 * time.Millisecond, Engines: &sim.EngineOptions{TimeScale: 0.01}, Client: kube}})
	require.NoError(t, err)
	t.Cleanup(machines.Stop)
	kubelet := machines.Kubelet
	pools := map[string][]string{}
	addNode := func(name, pool string) {
		node := sim.NewNode(name, sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: gpusNode}, map[string]string{poolLabel: pool, systemtest.OwnerLabel: ns})
		_, err := kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Logf("chaos: node %s not created: %v", name, err)
		}
	}
	for pool, n := range map[string]int{"a": 4, "b": 3} {
		for i := range n {
			name := fmt.Sprintf("%s-%s-%d", ns, pool, i)
			pools[pool] = append(pools[pool], name)
			addNode(name, pool)
		}
	}

	inv := watchInvariants(t, kube)

	f := &fleet{t: t, byRole: map[string][]*replicas.Replica{}, started: map[string]int{}, kills: map[string]int{}}
	for range 2 {
		f.start(replicas.Scheduler, "")
		f.start(replicas.Controller, "")
	}
	routers := []*routerSlot{{addr: freeAddr(t)}, {addr: freeAddr(t)}}
	routerOf := map[*routerSlot]*replicas.Replica{}
	var routerMu sync.Mutex
	for _, s := range routers {
		routerOf[s] = f.start(replicas.Router, s.addr)
	}
	replicas.Leader(t, f.alive(replicas.Scheduler)...)
	replicas.Leader(t, f.alive(replicas.Controller)...)
	for _, r := range f.alive(replicas.Router) {
		replicas.Leader(t, r) // serving
	}

	// The workload: ModelServings of random shape on a random pool, each with its
	// ModelServer and ModelRoute (model name = ModelServing name).
	var servings []string
	var servingsMu sync.Mutex
	// The fleet never asks a pool for more GPUs than it has, less one node's worth (a gang of
	// 2-GPU pods cannot use 1-GPU holes): "every ModelServing Available" is then a promise
	// the system can keep with every node back, and a ModelServing that cannot become
	// Available is Berth's failure, not the workload's. (A seeded run once asked pool b for
	// 26 of its 24 GPUs and, rightly, never settled.)
	type shape struct {
		pool                    string
		replicas, workers, gpus int
	}
	shapes := map[string]shape{}
	demand := func(pool string, except string) int {
		n := 0
		for name, sh := range shapes {
			if sh.pool == pool && name != except {
				n += sh.replicas * (1 + sh.workers) * sh.gpus
			}
		}
		return n
	}
	fits := func(pool, except string, sh shape) bool {
		return demand(pool, except)+sh.replicas*(1+sh.workers)*sh.gpus <= (len(pools[pool])-1)*gpusNode
	}
	createServing := func(i int) bool {
		name := fmt.Sprintf("m%d", i)
		pool := []string{"a", "b"}[rng.IntN(2)]
		replicas, workers, gpus := 1+rng.IntN(2), rng.IntN(2), 1+rng.IntN(2)
		if sh := (shape{pool, replicas, workers, gpus}); !fits(pool, "", sh) {
			pool = map[string]string{"a": "b", "b": "a"}[pool]
			if sh.pool = pool; !fits(pool, "", sh) {
				t.Logf("chaos: no pool has room for %s (%d replicas, %d workers, %d GPUs per pod)", name, replicas, workers, gpus)
				return false
			}
		}
		shapes[name] = shape{pool, replicas, workers, gpus}
		for _, doc := range servingManifests(name, pool, replicas, workers, gpus) {
			obj, err := systemtest.Decode(doc)
			require.NoError(t, err)
			obj.SetNamespace(ns)
			require.NoError(t, cl.Create(ctx, obj))
		}
		t.Logf("chaos: created %s on pool %s (%d replicas, %d workers, %d GPUs per pod)", name, pool, replicas, workers, gpus)
		servingsMu.Lock()
		servings = append(servings, name)
		servingsMu.Unlock()
		return true
	}
	for i := range 3 {
		createServing(i)
	}
	get := func(name string) *workloadv1alpha1.ModelServing {
		ms := &workloadv1alpha1.ModelServing{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ms); err != nil {
			return nil
		}
		return ms
	}
	allAvailable := func() (bool, string) {
		servingsMu.Lock()
		names := slices.Clone(servings)
		servingsMu.Unlock()
		for _, name := range names {
			ms := get(name)
			if ms == nil || ms.Status.ObservedGeneration != ms.Generation || ms.Status.AvailableReplicas != *ms.Spec.Replicas ||
				ms.Status.UpdatedReplicas != *ms.Spec.Replicas || ms.Status.Replicas != *ms.Spec.Replicas {
				if ms == nil {
					return false, name + " missing"
				}
				return false, fmt.Sprintf("%s: %d/%d available, %d updated, %d groups", name, ms.Status.AvailableReplicas, *ms.Spec.Replicas, ms.Status.UpdatedReplicas, ms.Status.Replicas)
			}
		}
		return true, ""
	}
	waitAvailable := func(what string, timeout time.Duration) {
		t.Helper()
		var why string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			var ok bool
			ok, why = allAvailable()
			return ok, nil
		})
		if err != nil {
			dumpCluster(t, kube, cl)
		}
		require.NoError(t, err, "%s: %s", what, why)
	}
	waitAvailable("the first ModelServings are Available", 2*time.Minute)

	// Clients: each request goes to a random router and, on any failure, is retried by the
	// client (another router, a little later) until it succeeds or requestDeadline passes.
	load := &loadStats{explained: map[string]int{}, unexplained: map[string]int{}, example: map[string]string{}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var clients sync.WaitGroup
	for c := range 4 {
		clients.Go(func() {
			crng := rand.New(rand.NewPCG(uint64(seed), uint64(100+c)))
			for loadCtx.Err() == nil {
				servingsMu.Lock()
				model := servings[crng.IntN(len(servings))]
				servingsMu.Unlock()
				load.request(loadCtx, crng, routers, inv, model)
				time.Sleep(time.Duration(20+crng.IntN(80)) * time.Millisecond)
			}
		})
	}

	// The chaos.
	end := time.Now().Add(*chaosDuration)
	next := 3
	actions := map[string]int{}
	for k := 0; time.Now().Before(end); k++ {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		// Every third action kills something, each kind in turn, so even a short run kills
		// every component; the others are drawn at random (kills included).
		a := rng.IntN(9)
		if k%3 == 0 {
			a = []int{4, 5, 6, 7}[(k/3)%4]
		}
		servingsMu.Lock()
		target := servings[rng.IntN(len(servings))]
		servingsMu.Unlock()
		switch a {
		case 0:
			if next < 6 {
				if createServing(next) {
					actions["create"]++
				}
				next++
			}
		case 1:
			if ms := get(target); ms != nil {
				r := int32(1 + rng.IntN(3))
				sh := shapes[target]
				sh.replicas = int(r)
				if !fits(sh.pool, target, sh) {
					t.Logf("chaos: no room in pool %s to scale %s to %d", sh.pool, target, r)
					continue
				}
				ms.Spec.Replicas = &r
				if cl.Update(ctx, ms) == nil {
					shapes[target] = sh
					t.Logf("chaos: scaled %s to %d", target, r)
					actions["scale"]++
				}
			}
		case 2:
			if ms := get(target); ms != nil {
				img := fmt.Sprintf("vllm/vllm-openai:v0.%d.0", 12+rng.IntN(1000))
				for i := range ms.Spec.Template.Roles {
					ms.Spec.Template.Roles[i].EntryTemplate.Spec.Containers[0].Image = img
				}
				if cl.Update(ctx, ms) == nil {
					t.Logf("chaos: rolled %s to %s", target, img)
					actions["roll"]++
				}
			}
		case 3:
			pods, _ := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: workloadv1alpha1.ModelServingNameLabel + "=" + target})
			if pods != nil && len(pods.Items) > 0 {
				p := pods.Items[rng.IntN(len(pods.Items))]
				if p.Status.Phase == corev1.PodRunning && kubelet.FailPod(ctx, ns, p.Name) == nil {
					t.Logf("chaos: failed pod %s", p.Name)
					actions["fail pod"]++
				}
			}
		case 4:
			f.killLeader(replicas.Scheduler, time.Duration(rng.IntN(3000))*time.Millisecond)
		case 5:
			f.killLeader(replicas.Controller, time.Duration(rng.IntN(3000))*time.Millisecond)
		case 6:
			s := routers[rng.IntN(len(routers))]
			routerMu.Lock()
			r := routerOf[s]
			routerMu.Unlock()
			if !s.down.Load() && len(f.alive(replicas.Router)) == 2 {
				s.down.Store(true)
				s.gen.Add(1)
				r.Kill()
				f.mu.Lock()
				f.kills[replicas.Router]++
				f.mu.Unlock()
				t.Logf("chaos: killed %s", r.Name)
				pause := time.Duration(rng.IntN(3000)) * time.Millisecond
				time.AfterFunc(pause, func() {
					nr := f.start(replicas.Router, s.addr)
					routerMu.Lock()
					routerOf[s] = nr
					routerMu.Unlock()
					select {
					case <-nr.Leading():
					case <-time.After(30 * time.Second):
					}
					s.down.Store(false)
				})
			}
		case 7, 8:
			pool := []string{"a", "b"}[rng.IntN(2)]
			node := pools[pool][rng.IntN(len(pools[pool]))]
			if _, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
				continue // lost already, not back yet
			}
			if kubelet.LoseNode(ctx, node) == nil {
				f.mu.Lock()
				f.kills["node"]++
				f.mu.Unlock()
				t.Logf("chaos: lost node %s", node)
				time.AfterFunc(time.Duration(1000+rng.IntN(4000))*time.Millisecond, func() { addNode(node, pool) })
			}
		}
	}
	t.Logf("chaos over: actions %v, kills %v", actions, f.kills)

	// Settle: every component back, every node back, every ModelServing Available.
	time.Sleep(5 * time.Second) // the last restarts and node returns are scheduled within 5 s
	for _, pool := range []string{"a", "b"} {
		for _, node := range pools[pool] {
			addNode(node, pool) // AlreadyExists for those already back
		}
	}
	waitAvailable("after the chaos, every ModelServing is Available", 3*time.Minute)
	stopLoad()
	clients.Wait()

	// Invariants checked at the end: nothing partly bound, nothing orphaned.
	inv.mu.Lock()
	pods := make([]*corev1.Pod, 0, len(inv.pods))
	for _, p := range inv.pods {
		pods = append(pods, p)
	}
	violations := slices.Clone(inv.violations)
	inv.mu.Unlock()
	var list workloadv1alpha1.ModelServingList
	require.NoError(t, cl.List(ctx, &list, client.InNamespace(ns)))
	owners := map[string]bool{}
	for _, ms := range list.Items {
		owners[string(ms.UID)] = true
	}
	groups := map[string][2]int{} // group -> bound, total
	for _, p := range pods {
		ref := metav1.GetControllerOf(p)
		assert.True(t, ref != nil && owners[string(ref.UID)], "pod %s has no live owner", p.Name)
		g := groups[p.Labels[workloadv1alpha1.GroupNameLabel]]
		g[1]++
		if p.Spec.NodeName != "" {
			g[0]++
		}
		groups[p.Labels[workloadv1alpha1.GroupNameLabel]] = g
	}
	for g, n := range groups {
		assert.Equal(t, n[1], n[0], "group %s: %d of %d pods bound once settled", g, n[0], n[1])
	}
	var pgs volcanov1beta1.PodGroupList
	require.NoError(t, cl.List(ctx, &pgs, client.InNamespace(ns)))
	for _, pg := range pgs.Items {
		ref := metav1.GetControllerOf(&pg)
		assert.True(t, ref != nil && owners[string(ref.UID)], "PodGroup %s has no live owner", pg.Name)
		_, hasPods := groups[pg.Name]
		assert.True(t, hasPods, "PodGroup %s has no pods", pg.Name)
	}
	var svcs corev1.ServiceList
	require.NoError(t, cl.List(ctx, &svcs, client.InNamespace(ns)))
	for _, s := range svcs.Items {
		ref := metav1.GetControllerOf(&s)
		assert.True(t, ref != nil && owners[string(ref.UID)], "Service %s has no live owner", s.Name)
	}
	assert.Empty(t, violations, "invariants broken during the run")
	assert.Empty(t, f.diedOnTheirOwn(), "replicas exited without being killed (lost a lease?)")

	load.mu.Lock()
	defer load.mu.Unlock()
	t.Logf("requests: %d sent, %d answered at the first try, %d lost after %s (%d of them while the model had no ready endpoint); failed tries explained: %s; unexplained: %s",
		load.sent, load.firstTry, load.lost, requestDeadline, load.lostOwned, counts(load.explained), counts(load.unexplained))
	t.Logf("kills: %d scheduler leaders, %d controller leaders, %d router replicas, %d nodes; invariants watched: no node over its GPUs, no ServingGroup with live pods of two revisions (every event); nothing partly bound, no orphan pod, PodGroup or Service, every ModelServing Available (settled)",
		f.kills[replicas.Scheduler], f.kills[replicas.Controller], f.kills[replicas.Router], f.kills["node"])
	assert.Positive(t, load.sent, "no request was sent")
	assert.Empty(t, load.lostWhy, "requests lost while their model had a ready endpoint")
	for r, n := range load.unexplained {
		assert.LessOrEqual(t, n, unexplainedBound, "%d tries failed with %s though no router kill and no loss of the model's pods explains them; e.g. %s", n, r, load.example[r])
	}
	for _, kind := range []string{replicas.Scheduler, replicas.Controller, replicas.Router, "node"} {
		assert.Positive(t, f.kills[kind], "the run killed no %s; it proves less than it says", kind)
	}
}

// servingManifests are a ModelServing of replicas groups on pool (one role, with workers
// workers, gpus GPUs per pod), its ModelServer and a ModelRoute for model name.
func servingManifests(name, pool string, replicas, workers, gpus int) []string {
	pod := fmt.Sprintf(`
        spec:
          nodeSelector: {%s: %s}
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "%s"]
            ports: [{containerPort: 8000}]
            resources: {limits: {nvidia.com/gpu: "%d"}}`, poolLabel, pool, name, gpus)
	worker := ""
	if workers > 0 {
		worker = fmt.Sprintf("\n      workerReplicas: %d\n      workerTemplate:%s", workers, pod)
	}
	return []string{fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: %s}
spec:
  schedulerName: berth-scheduler
  replicas: %d
  template:
    roles:
    - name: server
      replicas: 1
      entryTemplate:%s%s
`, name, replicas, pod, worker), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: %[1]s
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {modelserving.volcano.sh/name: %[1]s}}
  workloadPort: {port: 8000}
`, name), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: %[1]s}
spec:
  modelName: %[1]s
  rules:
  - targetModels: [{modelServerName: %[1]s}]
`, name)}
}

// invariants follows the namespace's pods for the whole run (an informer: a broken watch is
// relisted, no event is lost for good) and checks on every event that no node holds more
// GPUs than it has and no ServingGroup has live pods of two revisions.
type invariants struct {
	mu         sync.Mutex
	pods       map[string]*corev1.Pod
	violations []string
	endpoints  map[string]*endpoints // model -> its ready pods, as the test's informer saw them
}

// endpoints is the history of a model's ready pods: when it had none, and when one went
// away. It is what explains a failed request that no router kill explains.
type endpoints struct {
	ready    map[string]bool
	seen     bool           // it has had a ready pod
	noneFrom time.Time      // start of the current stretch with none (zero: it has some)
	none     [][2]time.Time // past stretches with none
	lost     []time.Time    // a ready pod stopped being ready or was deleted
}

func watchInvariants(t *testing.T, kube kubernetes.Interface) *invariants {
	inv := &invariants{pods: map[string]*corev1.Pod{}, endpoints: map[string]*endpoints{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { inv.set(obj.(*corev1.Pod), false) },
		UpdateFunc: func(_, obj any) { inv.set(obj.(*corev1.Pod), false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				inv.set(p, true)
			}
		},
	})
	require.NoError(t, err)
	factory.Start(ctx.Done())
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced))
	return inv
}

func (inv *invariants) set(p *corev1.Pod, deleted bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.trackEndpoint(p, deleted)
	if deleted {
		delete(inv.pods, p.Name)
		return
	}
	inv.pods[p.Name] = p
	used := map[string]int64{}
	revisions := map[string]map[string]bool{}
	for _, q := range inv.pods {
		if q.DeletionTimestamp != nil || q.Status.Phase == corev1.PodFailed {
			continue
		}
		if q.Spec.NodeName != "" {
			l := q.Spec.Containers[0].Resources.Limits[gpu]
			used[q.Spec.NodeName] += l.Value()
		}
		g := q.Labels[workloadv1alpha1.GroupNameLabel]
		if revisions[g] == nil {
			revisions[g] = map[string]bool{}
		}
		revisions[g][q.Labels[workloadv1alpha1.RevisionLabel]] = true
	}
	for node, n := range used {
		if n > gpusNode {
			inv.violations = append(inv.violations, fmt.Sprintf("%s: node %s holds %d GPUs of %d", time.Now().Format(time.StampMilli), node, n, gpusNode))
		}
	}
	for g, revs := range revisions {
		if len(revs) > 1 {
			inv.violations = append(inv.violations, fmt.Sprintf("%s: ServingGroup %s has live pods of %d revisions", time.Now().Format(time.StampMilli), g, len(revs)))
		}
	}
}

// trackEndpoint records whether p serves its model (Running, Ready, not being deleted).
func (inv *invariants) trackEndpoint(p *corev1.Pod, deleted bool) {
	model := p.Labels[workloadv1alpha1.ModelServingNameLabel]
	if model == "" {
		return
	}
	e := inv.endpoints[model]
	if e == nil {
		e = &endpoints{ready: map[string]bool{}}
		inv.endpoints[model] = e
	}
	now := time.Now()
	ready := !deleted && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
	if ready {
		ready = false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
	}
	switch was := e.ready[p.Name]; {
	case ready && !was:
		e.ready[p.Name] = true
		if !e.noneFrom.IsZero() {
			e.none = append(e.none, [2]time.Time{e.noneFrom, now})
			e.noneFrom = time.Time{}
		}
		e.seen = true
	case !ready && was:
		delete(e.ready, p.Name)
		e.lost = append(e.lost, now)
		if len(e.ready) == 0 {
			e.noneFrom = now
		}
	}
}

// disruption explains a request to model that failed between from and to by what its
// serving pods went through then: "no ready endpoint" when it had none at some moment (never
// had one, or lost them all), "an endpoint went away" when one of them stopped serving; ""
// when neither. slack widens the window on both sides: the routers learn of a pod's
// readiness through their own informers, a little after the test does.
func (inv *invariants) disruption(model string, from, to time.Time) string {
	from, to = from.Add(-disruptionSlack), to.Add(disruptionSlack)
	inv.mu.Lock()
	defer inv.mu.Unlock()
	e := inv.endpoints[model]
	if e == nil || !e.seen || (!e.noneFrom.IsZero() && e.noneFrom.Before(to)) {
		return "no ready endpoint"
	}
	for _, iv := range e.none {
		if iv[0].Before(to) && iv[1].After(from) {
			return "no ready endpoint"
		}
	}
	for _, at := range e.lost {
		if at.After(from) && at.Before(to) {
			return "an endpoint went away"
		}
	}
	return ""
}

const (
	// requestDeadline is how long a client retries one request (another router, 200 ms
	// later) before it counts the request lost; attemptTimeout bounds each try. An engine
	// answers in milliseconds here and a killed router refuses at connect, so a request that
	// needs seconds is one Berth failed: a router answering 503 for seconds must not pass.
	requestDeadline = 5 * time.Second
	attemptTimeout  = 3 * time.Second
	// disruptionSlack widens the window in which a model's lost endpoints explain a failure.
	disruptionSlack = 2 * time.Second
	// unexplainedBound is how many failed tries per reason the run accepts that no router
	// kill and no disruption of the model's pods explains.
	unexplainedBound = 0
)

// loadStats counts what the clients saw: every failed try by what explains it, and the
// failures nothing explains by reason, with an example of each.
type loadStats struct {
	mu              sync.Mutex
	sent, firstTry  int
	explained       map[string]int // failed tries by what explains them
	unexplained     map[string]int // failed tries nothing explains, by reason
	example         map[string]string
	lost, lostOwned int // lost requests; of those, lost while the model had no ready endpoint
	lostWhy         []string
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for r, n := range m {
		out = append(out, fmt.Sprintf("%s: %d", r, n))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// request sends one chat completion through a random router and retries it (another
// router, after a pause) until it succeeds or requestDeadline passes. Each failed try is
// explained by a router kill (in flight on the replica, or sent to it before it was back)
// or by the model's pods (inv.disruption), or counted as unexplained.
func (l *loadStats) request(ctx context.Context, rng *rand.Rand, routers []*routerSlot, inv *invariants, model string) {
	began := time.Now()
	deadline := began.Add(requestDeadline)
	for attempt := 0; ; attempt++ {
		s := routers[rng.IntN(len(routers))]
		gen, down := s.gen.Load(), s.down.Load()
		tried := time.Now()
		c := openai.NewClient(option.WithBaseURL("http://"+s.addr+"/v1"), option.WithAPIKey("chaos"), option.WithMaxRetries(0),
			option.WithRequestTimeout(attemptTimeout))
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}, MaxTokens: openai.Int(4)})
		if ctx.Err() != nil {
			return // the load stopped; the request was not lost to Berth
		}
		var why string
		switch {
		case err == nil:
		case s.gen.Load() != gen:
			why = "router killed in flight"
		case down:
			why = "router down (killed, not yet back)"
		default:
			why = inv.disruption(model, tried, time.Now())
		}
		l.mu.Lock()
		if attempt == 0 {
			l.sent++
		}
		switch {
		case err == nil && attempt == 0:
			l.firstTry++
		case err == nil:
		case why != "":
			l.explained[why]++
		default:
			r := reason(err)
			l.unexplained[r]++
			if l.example[r] == "" {
				detail := err.Error()
				var apiErr *openai.Error
				if errors.As(err, &apiErr) {
					// The router's own words (code and message), which the status alone does not say.
					detail = fmt.Sprintf("%d %s: %s", apiErr.StatusCode, apiErr.Code, apiErr.Message)
				}
				l.example[r] = fmt.Sprintf("%s at %s via %s: %s", model, tried.Format(time.StampMilli), s.addr, detail)
			}
		}
		if err == nil {
			l.mu.Unlock()
			return
		}
		if time.Now().After(deadline) {
			l.lost++
			if inv.disruption(model, began, time.Now()) == "no ready endpoint" {
				l.lostOwned++ // the model could not serve: its pods were down, not the routers
			} else {
				l.lostWhy = append(l.lostWhy, fmt.Sprintf("%s (from %s): %v", model, began.Format(time.StampMilli), err))
			}
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
}

// reason is a short class of a failed request.
func reason(err error) string {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return fmt.Sprintf("HTTP %d", apiErr.StatusCode)
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return "connection: " + op.Op
	}
	if errors.Is(err, http.ErrServerClosed) {
		return "server closed"
	}
	return "other"
}

// dumpCluster logs what a settle failure needs: every pod of the namespace with its node,
// phase, readiness, revision and scheduling condition; every PodGroup's status; every node
// of the pools with its GPUs and whether it is schedulable.
func dumpCluster(t *testing.T, kube kubernetes.Interface, cl client.Client) {
	ctx := context.Background()
	if pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			ready, sched := false, ""
			for _, c := range p.Status.Conditions {
				switch c.Type {
				case corev1.PodReady:
					ready = c.Status == corev1.ConditionTrue
				case corev1.PodScheduled:
					if c.Status != corev1.ConditionTrue {
						sched = c.Reason + ": " + c.Message
					}
				}
			}
			t.Logf("pod %s node=%q phase=%s ready=%v revision=%s deleting=%v %s", p.Name, p.Spec.NodeName, p.Status.Phase, ready,
				p.Labels[workloadv1alpha1.RevisionLabel], p.DeletionTimestamp != nil, sched)
		}
	}
	var pgs volcanov1beta1.PodGroupList
	if cl.List(ctx, &pgs, client.InNamespace(ns)) == nil {
		for _, pg := range pgs.Items {
			t.Logf("podgroup %s minMember=%d phase=%s running=%d conditions=%v", pg.Name, pg.Spec.MinMember, pg.Status.Phase, pg.Status.Running, pg.Status.Conditions)
		}
	}
	if nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: systemtest.OwnerLabel + "=" + ns}); err == nil {
		for _, n := range nodes.Items {
			gpus := n.Status.Allocatable[sim.GPUResource]
			t.Logf("node %s pool=%s gpus=%s unschedulable=%v taints=%v", n.Name, n.Labels[poolLabel], gpus.String(), n.Spec.Unschedulable, n.Spec.Taints)
		}
	}
}
