package apicheck_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"

	"github.com/berth-sh/berth/pkg/apicheck"
)

// needs is what berth-scheduler asks for, cut down: a core API, DRA (two releases) and
// Volcano's CRDs.
var needs = slices.Concat(
	apicheck.Builtin("", "v1", "pods"),
	apicheck.Builtin("1.34", "resource.k8s.io/v1", "deviceclasses", "resourceclaims"),
	apicheck.Builtin("1.37", "resource.k8s.io/v1", "devicetaintrules"),
	apicheck.CRDs(apicheck.Volcano, "scheduling.volcano.sh/v1beta1", "podgroups"),
	apicheck.CRDs(apicheck.Volcano, "topology.volcano.sh/v1alpha1", "hypernodes"),
)

func server(gitVersion, minor string, lists ...*metav1.APIResourceList) *fakediscovery.FakeDiscovery {
	return &fakediscovery.FakeDiscovery{
		Fake:               &clienttesting.Fake{Resources: lists},
		FakedServerVersion: &version.Info{Major: "1", Minor: minor, GitVersion: gitVersion},
	}
}

func resources(gv string, names ...string) *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: gv}
	for _, n := range names {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: n}, metav1.APIResource{Name: n + "/status"})
	}
	return l
}

var (
	core    = resources("v1", "pods", "nodes")
	dra134  = resources("resource.k8s.io/v1", "deviceclasses", "resourceclaims", "resourceslices")
	dra137  = resources("resource.k8s.io/v1", "deviceclasses", "resourceclaims", "resourceslices", "devicetaintrules")
	volcano = []*metav1.APIResourceList{resources("scheduling.volcano.sh/v1beta1", "podgroups", "queues"), resources("topology.volcano.sh/v1alpha1", "hypernodes")}
)

// An apiserver that serves everything passes.
func TestAllServed(t *testing.T) {
	require.NoError(t, apicheck.CheckServer(server("v1.37.1", "37", append([]*metav1.APIResourceList{core, dra137}, volcano...)...), "berth-scheduler", needs))
}

// Each missing API is named once with what serves it: built-in ones by group version with
// the release that serves them all, CRDs by who installs them.
func TestMissingNamesEachAPI(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *fakediscovery.FakeDiscovery
		want string
	}{{
		name: "an older release",
		d:    server("v1.31.4", "31", core),
		want: "berth-scheduler needs APIs that the apiserver (v1.31.4) does not serve: " +
			"resource.k8s.io/v1 deviceclasses, resourceclaims and devicetaintrules (Kubernetes 1.37 or later); " +
			"the CRDs podgroups.scheduling.volcano.sh (scheduling.volcano.sh/v1beta1) and hypernodes.topology.volcano.sh (topology.volcano.sh/v1alpha1): " +
			"install Volcano, or kubectl apply --server-side -f manifests/crds/volcano/",
	}, {
		name: "one release too old",
		d:    server("v1.36.2-eks-1234", "36+", append([]*metav1.APIResourceList{core, dra134}, volcano...)...),
		want: "berth-scheduler needs an API that the apiserver (v1.36.2-eks-1234) does not serve: resource.k8s.io/v1 devicetaintrules (Kubernetes 1.37 or later)",
	}, {
		name: "turned off on a release that has it",
		d:    server("v0.0.0-master+$Format:%H$", "37", append([]*metav1.APIResourceList{core}, volcano...)...),
		want: "berth-scheduler needs APIs that the apiserver (v1.37) does not serve: " +
			"resource.k8s.io/v1 deviceclasses, resourceclaims and devicetaintrules (turned off on this apiserver: see its --runtime-config)",
	}, {
		name: "a CRD missing",
		d:    server("v1.37.1", "37", core, dra137, volcano[0]),
		want: "berth-scheduler needs an API that the apiserver (v1.37.1) does not serve: " +
			"the CRD hypernodes.topology.volcano.sh (topology.volcano.sh/v1alpha1): install Volcano, or kubectl apply --server-side -f manifests/crds/volcano/",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := apicheck.CheckServer(tc.d, "berth-scheduler", needs)
			var missing *apicheck.MissingError
			require.ErrorAs(t, err, &missing)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

// An apiserver that cannot be asked is an error of its own, not a list of missing APIs.
func TestUnreachable(t *testing.T) {
	err := apicheck.Check(&rest.Config{Host: "http://127.0.0.1:1"}, "berth-controller", needs)
	require.Error(t, err)
	var missing *apicheck.MissingError
	assert.False(t, errors.As(err, &missing))
	assert.ErrorContains(t, err, "berth-controller: asking the apiserver which APIs it serves: ")
}
