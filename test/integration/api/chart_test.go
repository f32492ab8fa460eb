package api

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/loader"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	chartDir      = "../../../charts/berth"
	releaseNS     = "berth-system"
	releaseName   = "berth"
	chartTestFile = "testdata/chart-values.yaml"
)

// The chart is rendered as `helm template` and `helm install --dry-run=server` would, through
// Helm's Go SDK, against the test apiserver's real version.

func loadChart(t *testing.T) *chartv2.Chart {
	t.Helper()
	ch, err := loader.LoadDir(chartDir)
	require.NoError(t, err)
	c, ok := ch.(*chartv2.Chart)
	require.True(t, ok, "a v2 chart")
	return c
}

// serverVersion is the test apiserver's release. Built as a Go module, kube-apiserver keeps
// the placeholder git version v0.0.0-master (Kubernetes' own builds stamp it with ldflags),
// but its major and minor are the release it is: Helm is given v<major>.<minor>.0.
func serverVersion(t *testing.T) *common.KubeVersion {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cp.RESTConfig())
	require.NoError(t, err)
	info, err := dc.ServerVersion()
	require.NoError(t, err)
	kv, err := common.ParseKubeVersion(fmt.Sprintf("v%s.%s.0", info.Major, strings.TrimSuffix(info.Minor, "+")))
	require.NoError(t, err)
	return kv
}

func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	if path == "" {
		return map[string]any{}
	}
	v, err := common.ReadValuesFile(path)
	require.NoError(t, err)
	return v
}

// renderChart is `helm template berth charts/berth -n berth-system -f values --kube-version v`.
func renderChart(t *testing.T, values map[string]any, kubeVersion *common.KubeVersion) ([]*unstructured.Unstructured, error) {
	t.Helper()
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName, install.Namespace, install.Replace = releaseName, releaseNS, true
	install.KubeVersion = kubeVersion
	rel, err := install.RunWithContext(context.Background(), loadChart(t), values)
	if err != nil {
		return nil, err
	}
	r, ok := rel.(*releasev1.Release)
	require.True(t, ok)
	return decodeYAML(t, r.Manifest), nil
}

// installServerDryRun is `helm install berth charts/berth -n berth-system --dry-run=server`
// against the test apiserver: lookups see the cluster, and Helm checks who owns what exists.
func installServerDryRun(t *testing.T, values map[string]any) error {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(kubeconfig))
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	ns := releaseNS
	flags.Namespace = &ns
	cfg := action.NewConfiguration()
	require.NoError(t, cfg.Init(flags, releaseNS, "memory"))
	// What Helm asks discovery for, but with the release serverVersion explains.
	dc, err := flags.ToDiscoveryClient()
	require.NoError(t, err)
	apis, err := action.GetVersionSet(dc)
	require.NoError(t, err)
	cfg.Capabilities = &common.Capabilities{APIVersions: apis, KubeVersion: *serverVersion(t), HelmVersion: common.DefaultCapabilities.HelmVersion}
	install := action.NewInstall(cfg)
	install.DryRunStrategy = action.DryRunServer
	install.ReleaseName, install.Namespace = releaseName, releaseNS
	_, err = install.RunWithContext(context.Background(), loadChart(t), values)
	return err
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[objKey(o)] = o
	}
	return out
}

func objKey(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// kustomizeBuild is `kustomize build dir`.
func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", dir)
	raw, err := res.AsYaml()
	require.NoError(t, err)
	return decodeYAML(t, string(raw))
}

// helmOnly removes what only Helm adds: its ownership labels, the configuration checksum
// that restarts the scheduler on a change, the keep policy on CRDs. The scheduler's
// configuration is compared parsed, not as text (the base's is commented).
func helmOnly(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	c := o.DeepCopy()
	strip := func(m map[string]string, keys ...string) map[string]string {
		for _, k := range keys {
			delete(m, k)
		}
		if len(m) == 0 {
			return nil
		}
		return m
	}
	helmLabels := []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
	c.SetLabels(strip(c.GetLabels(), helmLabels...))
	c.SetAnnotations(strip(c.GetAnnotations(), "helm.sh/resource-policy"))
	if tmpl, ok, _ := unstructured.NestedMap(c.Object, "spec", "template", "metadata"); ok {
		labels, _, _ := unstructured.NestedStringMap(tmpl, "labels")
		annotations, _, _ := unstructured.NestedStringMap(tmpl, "annotations")
		tmpl = map[string]any{}
		if l := strip(labels, helmLabels...); l != nil {
			tmpl["labels"] = toAny(l)
		}
		if a := strip(annotations, "checksum/config"); a != nil {
			tmpl["annotations"] = toAny(a)
		}
		require.NoError(t, unstructured.SetNestedMap(c.Object, tmpl, "spec", "template", "metadata"))
	}
	if c.GetKind() == "ConfigMap" && c.GetName() == "berth-dashboard" {
		var dashboard map[string]any
		raw, _, _ := unstructured.NestedString(c.Object, "data", "berth-dashboard.json")
		require.NoError(t, json.Unmarshal([]byte(raw), &dashboard))
		c.Object["data"] = map[string]any{"berth-dashboard.json": dashboard}
	}
	if c.GetKind() == "ConfigMap" && c.GetName() == "berth-scheduler-config" {
		var cfg map[string]any
		raw, _, _ := unstructured.NestedString(c.Object, "data", "config.yaml")
		require.NoError(t, yaml.Unmarshal([]byte(raw), &cfg))
		c.Object["data"] = map[string]any{"config.yaml": cfg}
	}
	// Through JSON, so numbers compare alike whichever decoder read them.
	raw, err := json.Marshal(c.Object)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

func toAny(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// With its defaults the chart installs what the kustomize base installs, object for object
// and field for field (but for what Helm itself adds, and the Namespace, which helm install
// --create-namespace makes); with its optional parts on, what the base with the matching
// kustomize components installs. A change to one that the other lacks fails here.
func TestChartRendersTheKustomizeBase(t *testing.T) {
	kv := serverVersion(t)
	for _, tc := range []struct {
		name, kustomization string
		values              map[string]any
	}{
		{"defaults", filepath.Join("..", "..", "..", "manifests"), nil},
		{"components", filepath.Join("testdata", "overlay-all"), map[string]any{
			"metrics": map[string]any{
				"serviceMonitor": map[string]any{"enabled": true},
				"dashboard":      map[string]any{"enabled": true},
			},
			"llmazBackendRuntimes": map[string]any{"enabled": true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rendered, err := renderChart(t, tc.values, kv)
			require.NoError(t, err)
			chart, base := byKey(rendered), byKey(kustomizeBuild(t, tc.kustomization))
			for k, o := range base {
				if o.GetKind() == "Namespace" {
					delete(base, k)
				}
			}
			for k := range base {
				assert.Contains(t, chart, k, "the chart lacks an object of the kustomize base")
			}
			for k, o := range chart {
				b, ok := base[k]
				if !assert.True(t, ok, "the chart renders %s, which the kustomize base lacks", k) {
					continue
				}
				assert.Equal(t, helmOnly(t, b), helmOnly(t, o), "%s: chart (+) and kustomize base (-) differ", k)
			}
			// Every object carries Helm's labels, so `helm uninstall` and selectors find them.
			for k, o := range chart {
				assert.Equal(t, releaseName, o.GetLabels()["app.kubernetes.io/instance"], "%s", k)
			}
		})
	}
}

// A values file that changes everything a user tunes renders each change where it belongs,
// and every object of both renderings is accepted by the apiserver (server-side dry run).
func TestChartValues(t *testing.T) {
	objs, err := renderChart(t, readValues(t, chartTestFile), serverVersion(t))
	require.NoError(t, err)
	m := byKey(objs)
	get := func(kind, name string) *unstructured.Unstructured {
		ns := releaseNS
		if strings.HasPrefix(kind, "Cluster") || kind == "CustomResourceDefinition" {
			ns = ""
		}
		o := m[fmt.Sprintf("%s %s/%s", kind, ns, name)]
		require.NotNil(t, o, "%s %s rendered", kind, name)
		return o
	}
	container := func(name string) map[string]any {
		cs, _, _ := unstructured.NestedSlice(get("Deployment", name).Object, "spec", "template", "spec", "containers")
		require.Len(t, cs, 1)
		return cs[0].(map[string]any)
	}
	args := func(name string) []string {
		var out []string
		for _, a := range container(name)["args"].([]any) {
			out = append(out, a.(string))
		}
		return out
	}
	for _, name := range []string{"berth-scheduler", "berth-controller", "berth-router"} {
		assert.Equal(t, "registry.example.com/ml/"+name+":v0.1.0-rc.1", container(name)["image"], "image.registry and image.tag")
		assert.Equal(t, "Always", container(name)["imagePullPolicy"])
		replicas, _, _ := unstructured.NestedInt64(get("Deployment", name).Object, "spec", "replicas")
		assert.EqualValues(t, 3, replicas, "%s replicas", name)
		cpu, _, _ := unstructured.NestedString(container(name), "resources", "limits", "cpu")
		assert.Equal(t, "2", cpu, "%s resources", name)
		pull, _, _ := unstructured.NestedSlice(get("Deployment", name).Object, "spec", "template", "spec", "imagePullSecrets")
		assert.Equal(t, []any{map[string]any{"name": "registry-creds"}}, pull)
		// Three replicas: the budget still lets one go at a time.
		maxUnavailable, _, _ := unstructured.NestedInt64(get("PodDisruptionBudget", name).Object, "spec", "maxUnavailable")
		assert.EqualValues(t, 1, maxUnavailable)
	}

	// The scheduler's configuration.
	raw, _, _ := unstructured.NestedString(get("ConfigMap", "berth-scheduler-config").Object, "data", "config.yaml")
	var cfg struct {
		APIVersion       string `json:"apiVersion"`
		Kind             string `json:"kind"`
		ClientConnection struct {
			QPS   float64 `json:"qps"`
			Burst int     `json:"burst"`
		} `json:"clientConnection"`
		PercentageOfNodesToScore *int `json:"percentageOfNodesToScore"`
		LeaderElection           struct {
			LeaderElect       bool   `json:"leaderElect"`
			ResourceNamespace string `json:"resourceNamespace"`
		} `json:"leaderElection"`
		Profiles []struct {
			PluginConfig []struct {
				Name string         `json:"name"`
				Args map[string]any `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(raw), &cfg), raw)
	// kube-scheduler reads it as berth-scheduler will (strictly: a misspelt field fails).
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(raw), 0o600))
	_, err = scheduleroptions.LoadConfigFromFile(klog.Background(), cfgFile)
	require.NoError(t, err, "kube-scheduler loads the rendered configuration")
	assert.Equal(t, 400.0, cfg.ClientConnection.QPS)
	assert.Equal(t, 800, cfg.ClientConnection.Burst)
	require.NotNil(t, cfg.PercentageOfNodesToScore)
	assert.Equal(t, 30, *cfg.PercentageOfNodesToScore)
	assert.False(t, cfg.LeaderElection.LeaderElect)
	assert.Equal(t, releaseNS, cfg.LeaderElection.ResourceNamespace)
	require.Len(t, cfg.Profiles, 1)
	pluginArgs := map[string]map[string]any{}
	for _, pc := range cfg.Profiles[0].PluginConfig {
		pluginArgs[pc.Name] = pc.Args
	}
	assert.EqualValues(t, 5, pluginArgs["BerthGang"]["backoffSeconds"], "plugin args reach the plugins")
	assert.EqualValues(t, 120, pluginArgs["BerthTopology"]["retryOtherDomainSeconds"])
	// Maps merge with the defaults (Helm's rule): the one cost set here changes, the rest stay.
	costs, _ := pluginArgs["BerthAccelerator"]["classCosts"].(map[string]any)
	assert.EqualValues(t, 1.0, costs["NVIDIA-H100-80GB-HBM3"])
	assert.EqualValues(t, 4.0, costs["NVIDIA-B200"])
	tiers, _ := pluginArgs["BerthTopology"]["nodeLabelTiers"].([]any)
	assert.Len(t, tiers, 1, "lists replace the defaults")
	_, hasPriority, _ := unstructured.NestedString(get("Deployment", "berth-scheduler").Object, "spec", "template", "spec", "priorityClassName")
	assert.False(t, hasPriority, "scheduler.priorityClassName \"\" runs without a priority class")
	assert.NotContains(t, m, "ResourceQuota "+releaseNS+"/berth-critical-pods", "no quota without a priority class")

	// The controller's flags.
	assert.Contains(t, args("berth-controller"), "--manage=berth")
	assert.Contains(t, args("berth-controller"), "--leader-elect=false")
	assert.Contains(t, args("berth-controller"), "--variant-actuation=metric", "extraArgs")

	// The router's Service and flags.
	svc := get("Service", "berth-router")
	svcType, _, _ := unstructured.NestedString(svc.Object, "spec", "type")
	assert.Equal(t, "LoadBalancer", svcType)
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	assert.EqualValues(t, 8000, ports[0].(map[string]any)["port"])
	assert.EqualValues(t, 9443, ports[1].(map[string]any)["port"])
	assert.Equal(t, "internal", svc.GetAnnotations()["networking.example.com/load-balancer"])
	assert.Contains(t, args("berth-router"), "--redis-addr=redis.berth-system.svc:6379")
	assert.Contains(t, args("berth-router"), "--policy=round-robin")

	// CRD families: Volcano's and scheduler-plugins' asked for, llmaz's not.
	crds := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds[o.GetName()] = true
			assert.Empty(t, o.GetAnnotations()["helm.sh/resource-policy"], "crds.keep false")
		}
	}
	assert.True(t, crds["podgroups.scheduling.volcano.sh"] && crds["hypernodes.topology.volcano.sh"], "crds.volcano")
	assert.True(t, crds["podgroups.scheduling.x-k8s.io"], "crds.schedulerPlugins")
	assert.True(t, crds["leaderworkersets.leaderworkerset.x-k8s.io"], "crds.lws (its file is JSON)")
	assert.True(t, crds["modelservings.workload.serving.volcano.sh"], "crds.kthena")
	assert.False(t, crds["playgrounds.inference.llmaz.io"], "crds.llmaz false")
	assert.Len(t, crds, 7+2+1+1+1, "Kthena's seven, Volcano's two, scheduler-plugins', LWS's and llm-d's")

	// ServiceMonitors and the dashboard.
	for _, name := range []string{"berth-scheduler", "berth-controller", "berth-router"} {
		sm := get("ServiceMonitor", name)
		assert.Equal(t, "kube-prometheus", sm.GetLabels()["release"], "metrics.serviceMonitor.labels")
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		assert.Equal(t, "15s", eps[0].(map[string]any)["interval"])
	}
	dash := get("ConfigMap", "berth-dashboard")
	assert.Equal(t, "1", dash.GetLabels()["grafana_dashboard"])
	dashJSON, _, _ := unstructured.NestedString(dash.Object, "data", "berth-dashboard.json")
	assert.True(t, json.Valid([]byte(dashJSON)), "the dashboard is JSON")

	// Both renderings go through the apiserver.
	defaults, err := renderChart(t, nil, serverVersion(t))
	require.NoError(t, err)
	applyDryRun(t, defaults)
	applyDryRun(t, objs)
}

// applyDryRun applies every object with a server-side dry run: the apiserver validates it as
// it would on install (schemas, CEL rules, RBAC escalation checks) and stores nothing.
func applyDryRun(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	c := newClient(t)
	ctx := context.Background()
	for _, ns := range []string{releaseNS, "kube-system"} {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	installServiceMonitorCRD(t)
	for _, obj := range objs {
		err := c.Patch(ctx, obj, client.Apply, client.FieldOwner("berth-chart-test"), client.ForceOwnership, client.DryRunAll)
		assert.NoError(t, err, "%s", objKey(obj))
	}
}

// installServiceMonitorCRD installs testdata/servicemonitor-crd.yaml: the fields of
// Prometheus Operator's ServiceMonitor (monitoring.coreos.com/v1) the chart writes, so a
// misspelt one is refused as the real CRD would refuse it.
func installServiceMonitorCRD(t *testing.T) {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	c, err := client.New(cp.RESTConfig(), client.Options{Scheme: scheme})
	require.NoError(t, err)
	raw, err := os.ReadFile("testdata/servicemonitor-crd.yaml")
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(raw, &crd))
	err = c.Create(context.Background(), &crd)
	if apierrors.IsAlreadyExists(err) {
		return
	}
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var got apiextensionsv1.CustomResourceDefinition
		if c.Get(context.Background(), client.ObjectKey{Name: crd.Name}, &got) != nil {
			return false
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	}, 30*1e9, 100*1e6)
}

// helm lint finds nothing to warn about, with the defaults or the test's values.
func TestChartLint(t *testing.T) {
	kv := serverVersion(t)
	for _, file := range []string{"", chartTestFile} {
		result := lint.RunAll(chartDir, readValues(t, file), releaseNS, lint.WithKubeVersion(kv))
		for _, msg := range result.Messages {
			assert.Less(t, msg.Severity, support.WarningSev, "helm lint (values %q): %s", file, msg)
		}
	}
}

// The chart says which Kubernetes it needs; an older cluster is refused before anything is
// rendered, naming the constraint.
func TestChartRefusesAnOlderKubernetes(t *testing.T) {
	old, err := common.ParseKubeVersion("v1.33.4")
	require.NoError(t, err)
	_, err = renderChart(t, nil, old)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "v1.33.4")
	assert.Contains(t, err.Error(), ">=1.37")
}

// Bad values are refused with what is wrong, before anything is applied.
func TestChartRefusesBadValues(t *testing.T) {
	kv := serverVersion(t)
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"image": map[string]any{"tag": "latest"}}, "latest is not a release"},
		{map[string]any{"controller": map[string]any{"manage": "some"}}, "/controller/manage"},
		{map[string]any{"schedular": map[string]any{"replicas": 1}}, "schedular"},
		{map[string]any{"router": map[string]any{"service": map[string]any{"type": "Ingress"}}}, "type"},
	} {
		_, err := renderChart(t, tc.values, kv)
		if assert.Error(t, err, "%v", tc.values) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
}

// On a cluster where another project's CRDs of Berth's kinds are installed (this test
// apiserver's were installed without Helm, as Kthena's or llmaz's install would leave them),
// the install neither takes them over nor guesses which controller owns the objects:
//   - with controller.manage unset it stops and asks (berth or all);
//   - with manage=berth but the chart's own copies of those CRDs, Helm refuses to replace
//     CRDs it does not own;
//   - with manage=berth and those CRD families off, it installs.
func TestChartBesideAnotherProject(t *testing.T) {
	err := installServerDryRun(t, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "modelservings.workload.serving.volcano.sh")
	assert.Contains(t, err.Error(), "controller.manage=berth")
	assert.Contains(t, err.Error(), "controller.manage=all")

	err = installServerDryRun(t, map[string]any{"controller": map[string]any{"manage": "berth"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CustomResourceDefinition", "Helm will not take over another install's CRD")

	err = installServerDryRun(t, map[string]any{
		"controller": map[string]any{"manage": "berth"},
		"crds":       map[string]any{"kthena": false, "llmaz": false, "llmd": false},
	})
	assert.NoError(t, err)
}

// berth-scheduler runs at system-cluster-critical. On an apiserver that admits that class
// only under a quota scoped to it (GKE), its pods are refused in a namespace without one, and
// admitted in the release namespace with the chart's ResourceQuota; without a priority class
// (scheduler.priorityClassName="") they need none.
func TestChartSchedulerPriorityAdmittedAsOnGKE(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	kv := serverVersion(t)
	schedulerPod := func(objs []*unstructured.Unstructured, ns string) *corev1.Pod {
		for _, o := range objs {
			if o.GetKind() == "Deployment" && o.GetName() == "berth-scheduler" {
				var d appsv1.Deployment
				require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d))
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "berth-scheduler-", Namespace: ns, Labels: d.Spec.Template.Labels},
					Spec: d.Spec.Template.Spec}
			}
		}
		t.Fatal("no berth-scheduler Deployment rendered")
		return nil
	}
	objs, err := renderChart(t, nil, kv)
	require.NoError(t, err)

	// A namespace without the quota: refused, as GKE refuses it.
	bare := newNamespace(t, c)
	err = c.Create(ctx, schedulerPod(objs, bare), client.DryRunAll)
	require.Error(t, err, "a system-cluster-critical pod outside a quota is refused")
	assert.Contains(t, err.Error(), "insufficient quota to match these scopes")

	// The release namespace with the chart's quota (its status as the quota controller,
	// which this control plane does not run, would write it).
	ns := newNamespace(t, c)
	var quota *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ResourceQuota" {
			quota = o.DeepCopy()
		}
	}
	require.NotNil(t, quota, "the chart renders the priority-class quota")
	var rq corev1.ResourceQuota
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(quota.Object, &rq))
	rq.Namespace = ns
	require.NoError(t, c.Create(ctx, &rq))
	rq.Status = corev1.ResourceQuotaStatus{Hard: rq.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	require.NoError(t, c.Status().Update(ctx, &rq))
	assert.NoError(t, c.Create(ctx, schedulerPod(objs, ns), client.DryRunAll), "admitted under the chart's quota")

	// Without a priority class, no quota is rendered and none is needed.
	objs, err = renderChart(t, map[string]any{"scheduler": map[string]any{"priorityClassName": ""}}, kv)
	require.NoError(t, err)
	for _, o := range objs {
		assert.NotEqual(t, "ResourceQuota", o.GetKind())
	}
	assert.NoError(t, c.Create(ctx, schedulerPod(objs, bare), client.DryRunAll))
}

// router.mode=epp runs berth-router as an endpoint picker: ext_proc and gRPC health instead
// of the OpenAI API, gRPC probes on the health port, and a Service port an InferencePool's
// endpointPickerRef can name; the apiserver accepts every object (server-side dry run).
func TestChartRouterEPPMode(t *testing.T) {
	values := map[string]any{"router": map[string]any{"mode": "epp", "epp": map[string]any{"port": 9100, "fallbacks": 1}}}
	objs, err := renderChart(t, values, serverVersion(t))
	require.NoError(t, err)
	m := byKey(objs)
	dep, svc := m["Deployment "+releaseNS+"/berth-router"], m["Service "+releaseNS+"/berth-router"]
	require.NotNil(t, dep)
	require.NotNil(t, svc)
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := cs[0].(map[string]any)
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	assert.Subset(t, args, []string{"--mode=epp", "--epp-addr=:9100", "--epp-health-addr=:9003", "--epp-fallbacks=1", "--epp-secure-serving=true", "--admin-addr=:8081"})
	assert.NotContains(t, args, "--addr=:8080", "no OpenAI listener in epp mode")
	readiness, _, _ := unstructured.NestedMap(c, "readinessProbe", "grpc")
	assert.Equal(t, map[string]any{"port": int64(9003), "service": "readiness"}, readiness)
	liveness, _, _ := unstructured.NestedMap(c, "livenessProbe", "grpc")
	assert.Equal(t, map[string]any{"port": int64(9003), "service": "liveness"}, liveness)
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	require.Len(t, ports, 2)
	assert.Equal(t, map[string]any{"name": "grpc-ext-proc", "port": int64(9100), "targetPort": "grpc", "appProtocol": "http2"}, ports[0])
	// This apiserver already has the CRDs, from another install: as in
	// TestChartBesideAnotherProject, the controller is told which objects are its own and
	// the chart leaves the CRDs alone.
	values["controller"] = map[string]any{"manage": "berth"}
	values["crds"] = map[string]any{"kthena": false, "llmaz": false, "llmd": false}
	require.NoError(t, installServerDryRun(t, values))

	_, err = renderChart(t, map[string]any{"router": map[string]any{"mode": "gateway"}}, serverVersion(t))
	require.Error(t, err, "the schema allows proxy and epp only")
}
