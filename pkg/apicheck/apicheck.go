// Package apicheck is the startup preflight of Berth's binaries: before they start an
// informer, each asks the apiserver's discovery once which APIs it serves and stops with one
// error naming every API it needs and the apiserver lacks, and what provides it. Without it,
// an informer for a missing API retries its list forever (berth-scheduler never schedules)
// or until a cache-sync timeout two minutes later (berth-controller), and the reason is one
// "could not find the requested resource" among many log lines.
//
// What each binary needs is listed beside its assembly (pkg/scheduler, pkg/controller,
// pkg/router); this package only asks and words the answer.
package apicheck

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// API is one resource of one group version a binary needs.
type API struct {
	// GroupVersion is "resource.k8s.io/v1", or "v1" for the core group.
	GroupVersion string
	// Resource is the plural resource name: "resourceclaims".
	Resource string
	// Since is the first Kubernetes release whose apiserver serves a built-in API ("1.34");
	// empty for a CRD and for the core APIs every release serves.
	Since string
	// CRD says how to install a custom resource's definition; nil for a built-in API.
	CRD *Provider
}

// Provider is where a set of CRDs comes from.
type Provider struct {
	// Install says what to do when they are missing.
	Install string
}

// The CRDs Berth's binaries read.
var (
	// Volcano's PodGroup and HyperNode (manifests/crds/volcano/, not in the kustomize base).
	Volcano = &Provider{Install: "install Volcano, or kubectl apply --server-side -f manifests/crds/volcano/"}
	// Kthena's, llmaz's and llm-d's kinds, in the versions Berth serves them (manifests/crds).
	// On a cluster with another project's CRDs of these kinds, apply only the missing ones.
	// The Gateway API's standard channel (GatewayClass, Gateway, HTTPRoute, ReferenceGrant) and
	// the Inference Extension's InferencePool, which berth-router serves as a gateway.
	GatewayAPI = &Provider{Install: "install the Gateway API standard channel and the Inference Extension's InferencePool CRD, or kubectl apply --server-side -f manifests/crds/gateway-api/"}
	Berth      = &Provider{Install: "install from manifests/crds: kubectl apply --server-side -f manifests/crds/<group>_<resource>.yaml, or -k manifests/crds for all of Berth's"}
)

// Builtin lists resources of a group version that Kubernetes serves from release since on
// ("" for the core APIs every release serves).
func Builtin(since, groupVersion string, resources ...string) []API {
	out := make([]API, len(resources))
	for i, r := range resources {
		out[i] = API{GroupVersion: groupVersion, Resource: r, Since: since}
	}
	return out
}

// CRDs lists custom resources of a group version that p's CRDs define.
func CRDs(p *Provider, groupVersion string, resources ...string) []API {
	out := make([]API, len(resources))
	for i, r := range resources {
		out[i] = API{GroupVersion: groupVersion, Resource: r, CRD: p}
	}
	return out
}

// timeout bounds each discovery request: an apiserver that does not answer fails the
// check instead of hanging the start.
const timeout = 30 * time.Second

// Check asks the apiserver cfg points at which APIs it serves and returns a *MissingError
// naming those of apis it does not serve, or nil when it serves them all. component names
// the binary in the error.
func Check(cfg *rest.Config, component string, apis []API) error {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = timeout
	}
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%s: discovery client: %w", component, err)
	}
	return CheckServer(d, component, apis)
}

// CheckServer is Check with a discovery client.
func CheckServer(d discovery.DiscoveryInterface, component string, apis []API) error {
	_, lists, err := d.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return fmt.Errorf("%s: asking the apiserver which APIs it serves: %w", component, err)
	}
	// A group whose discovery failed (an aggregated API that is down) is left out of lists;
	// none of Berth's APIs is aggregated, so that is "not served" for what Berth needs.
	served := map[string]bool{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			served[l.GroupVersion+" "+r.Name] = true
		}
	}
	var missing []API
	for _, a := range apis {
		if !served[a.GroupVersion+" "+a.Resource] {
			missing = append(missing, a)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	e := &MissingError{Component: component, Missing: missing}
	if v, err := d.ServerVersion(); err == nil {
		e.Server = v
	}
	return e
}

// MissingError names the APIs a binary needs and the apiserver does not serve.
type MissingError struct {
	Component string
	Missing   []API
	// Server is the apiserver's version, nil when it did not say.
	Server *version.Info
}

// Error is one line: the binary, the apiserver's version, then each missing API with what
// provides it. Built-in resources are grouped by group version, CRDs by provider, in the
// order they were listed.
func (e *MissingError) Error() string {
	var groups [][]API
	index := map[any]int{} // group version (built-in) or *Provider (CRD) -> groups index
	for _, a := range e.Missing {
		var key any = a.GroupVersion
		if a.CRD != nil {
			key = a.CRD
		}
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], a)
	}
	items := make([]string, len(groups))
	for i, g := range groups {
		if g[0].CRD != nil {
			items[i] = crdItem(g)
		} else {
			items[i] = e.builtinItem(g)
		}
	}
	what := "an API"
	if len(e.Missing) > 1 {
		what = "APIs"
	}
	return fmt.Sprintf("%s needs %s that the apiserver (%s) does not serve: %s", e.Component, what, e.serverVersion(), strings.Join(items, "; "))
}

// builtinItem is "resource.k8s.io/v1 deviceclasses and resourceclaims (Kubernetes 1.34 or
// later)": the resources of one group version and the release that serves them all.
func (e *MissingError) builtinItem(apis []API) string {
	names := make([]string, len(apis))
	since := ""
	for i, a := range apis {
		names[i] = a.Resource
		if minor(a.Since) > minor(since) {
			since = a.Since
		}
	}
	s := apis[0].GroupVersion + " " + list(names)
	switch {
	case since == "":
	case e.Server != nil && minor(e.Server.Major+"."+e.Server.Minor) >= minor(since):
		// A release that has them, with them turned off (or a stripped-down distribution).
		s += " (turned off on this apiserver: see its --runtime-config)"
	default:
		s += fmt.Sprintf(" (Kubernetes %s or later)", since)
	}
	return s
}

// crdItem is "the CRDs a.x.io (x.io/v1) and b.x.io (x.io/v1): <install>".
func crdItem(apis []API) string {
	names := make([]string, len(apis))
	for i, a := range apis {
		group, _, _ := strings.Cut(a.GroupVersion, "/")
		names[i] = fmt.Sprintf("%s.%s (%s)", a.Resource, group, a.GroupVersion)
	}
	noun := "the CRD "
	if len(apis) > 1 {
		noun = "the CRDs "
	}
	return noun + list(names) + ": " + apis[0].CRD.Install
}

// serverVersion is the apiserver's release as it reports it: its git version, or
// vMAJOR.MINOR when that is not a release (an apiserver built from source says v0.0.0).
func (e *MissingError) serverVersion() string {
	switch v := e.Server; {
	case v == nil:
		return "version unknown"
	case strings.HasPrefix(v.GitVersion, "v") && !strings.HasPrefix(v.GitVersion, "v0.0.0"):
		return v.GitVersion
	case v.Major != "" && v.Minor != "":
		return "v" + v.Major + "." + strings.TrimSuffix(v.Minor, "+")
	default:
		return "version unknown"
	}
}

// minor is the minor release of "1.34" (34; -1 when it is not 1.x). Providers report minors
// like "31+".
func minor(release string) int {
	major, m, ok := strings.Cut(release, ".")
	if !ok || major != "1" {
		return -1
	}
	m = strings.TrimRight(m, "+")
	if i := strings.IndexFunc(m, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		m = m[:i]
	}
	n, err := strconv.Atoi(m)
	if err != nil {
		return -1
	}
	return n
}

// list joins "a", "b" and "c" as "a, b and c".
func list(s []string) string {
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
