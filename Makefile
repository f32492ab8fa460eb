# Berth — build, generate and test. `make test` is the one test command; .ci/run calls it.
SHELL := /bin/bash
GO ?= go
# go test, with a summary of the failed tests printed last (CI shows a run's tail)
GOTEST = GO=$(GO) hack/gotest/run.sh
CONTROLLER_GEN := $(GO) tool controller-gen
# Generated files: make test fails when these differ from what the generators produce.
GENERATED = $(shell find pkg/apis -name 'zz_generated.*.go') $(shell find manifests/crds -name '*.yaml' -o -name '*.json') $(RBAC_GENERATED) $(CHART_FILES)
# What the Helm chart carries from manifests/ (charts/berth/files/), copied by make manifests
# so that the chart and the kustomize base install the same CRDs, RBAC and BackendRuntimes.
CHART_FILES = $(shell find charts/berth/files -type f 2>/dev/null)
# berth-controller's ClusterRole and leader-election Role, from the +kubebuilder:rbac markers
# in pkg/ (every such marker is berth-controller's; the scheduler's and router's RBAC is
# hand-written in manifests/scheduler and manifests/router).
RBAC_GENERATED = manifests/controller/role.yaml
TEST_TIMEOUT ?= 60m

# The release is written in one place, VERSION, and stamped into every binary (pkg/version)
# with the commit and the commit's time. The commit's time, not the build's, so rebuilding a
# commit gives the same bytes (SOURCE_DATE_EPOCH, as reproducible-builds.org names it).
VERSION := $(shell cat VERSION)
GIT_COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r $(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/berth-sh/berth/pkg/version
VERSION_LDFLAGS := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).GitCommit=$(GIT_COMMIT) -X $(VERSION_PKG).BuildDate=$(BUILD_DATE)
BINARIES := scheduler controller router sandbox

.PHONY: all build binaries images run generate manifests chart-files verify-generated vet test test-deps test-unit test-integration test-race-integration clean FORCE

all: build

build:
	$(GO) build ./...

## binaries: static, stamped binaries: bin/berth-{scheduler,controller,router,sandbox}
binaries: $(BINARIES:%=bin/berth-%)

bin/berth-%: FORCE
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(VERSION_LDFLAGS)' -o $@ ./cmd/$*

## images: the berth-scheduler, berth-controller and berth-router images, built without a
## Docker engine (hack/imagebuild) into bin/images/: <name>.tar, a docker-archive for
## docker load and kind load image-archive, and <name>/, an OCI layout for crane push.
## The Dockerfile builds the same images with Docker.
images:
	$(GO) run ./hack/imagebuild -out bin/images -version $(VERSION) -commit $(GIT_COMMIT) -source-date-epoch $(SOURCE_DATE_EPOCH)

## run: the sandbox: control plane, simulated GPU fabric, berth-scheduler, berth-controller,
## examples/ applied; Ctrl-C stops it. Flags go in ARGS, e.g. make run ARGS='--once --spines 4'
run:
	$(GO) run -ldflags '$(VERSION_LDFLAGS)' ./cmd/sandbox $(ARGS)

## generate: deepcopy functions for the API types
generate:
	$(CONTROLLER_GEN) object paths=./pkg/apis/...

## manifests: CRDs from the kubebuilder markers, plus Volcano's PodGroup and HyperNode CRDs
## generated from volcano.sh/apis, scheduler-plugins' PodGroup CRD generated from
## sigs.k8s.io/scheduler-plugins and LeaderWorkerSet's CRD generated from sigs.k8s.io/lws
## (the same modules our code uses; its pod templates' descriptions trimmed as ours are, and
## written as compact JSON to stay small) for the test control plane; the Gateway API
## standard-channel and InferencePool CRDs copied (descriptions dropped) from the
## sigs.k8s.io/gateway-api and gateway-api-inference-extension modules, for the same;
## berth-controller's RBAC roles from the +kubebuilder:rbac markers in pkg/.
manifests:
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true paths=./pkg/apis/... output:crd:dir=manifests/crds
	$(CONTROLLER_GEN) rbac:roleName=berth-controller,fileName=role.yaml paths=./pkg/... output:rbac:dir=manifests/controller
	$(GO) run ./hack/crdtrim manifests/crds/workload.serving.volcano.sh_modelservings.yaml manifests/crds/inference.llmaz.io_services.yaml
	rm -rf manifests/crds/volcano
	$(CONTROLLER_GEN) crd paths=volcano.sh/apis/pkg/apis/scheduling/v1beta1 paths=volcano.sh/apis/pkg/apis/topology/v1alpha1 output:crd:dir=manifests/crds/volcano
	rm -f manifests/crds/volcano/scheduling.volcano.sh_queues.yaml
	rm -rf manifests/crds/scheduler-plugins
	$(CONTROLLER_GEN) crd paths=sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1 output:crd:dir=manifests/crds/scheduler-plugins
	rm -f manifests/crds/scheduler-plugins/scheduling.x-k8s.io_elasticquotas.yaml
	rm -rf manifests/crds/lws
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true paths=sigs.k8s.io/lws/api/leaderworkerset/v1 output:crd:dir=manifests/crds/lws
	$(GO) run ./hack/crdtrim -json manifests/crds/lws/leaderworkerset.x-k8s.io_leaderworkersets.yaml
	rm -rf manifests/crds/gateway-api
	gw=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)/config/crd/standard; \
	gie=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api-inference-extension)/config/crd/bases; \
	$(GO) run ./hack/crdcopy -out manifests/crds/gateway-api $$gw/gateway.networking.k8s.io_gatewayclasses.yaml \
	  $$gw/gateway.networking.k8s.io_gateways.yaml $$gw/gateway.networking.k8s.io_httproutes.yaml \
	  $$gw/gateway.networking.k8s.io_referencegrants.yaml $$gie/inference.networking.k8s.io_inferencepools.yaml
	$(MAKE) --no-print-directory chart-files

## chart-files: copy into charts/berth/files/ what the chart shares with the kustomize base
## (part of make manifests; never edit charts/berth/files/ by hand)
CHART := charts/berth/files
chart-files:
	rm -rf $(CHART) && mkdir -p $(CHART)/crds/kthena $(CHART)/crds/llmaz $(CHART)/crds/llmd $(CHART)/crds/volcano $(CHART)/crds/scheduler-plugins $(CHART)/crds/lws $(CHART)/rbac $(CHART)/llmaz-backendruntimes
	cp manifests/crds/workload.serving.volcano.sh_*.yaml manifests/crds/networking.serving.volcano.sh_*.yaml $(CHART)/crds/kthena/
	cp manifests/crds/inference.llmaz.io_*.yaml manifests/crds/llmaz.io_*.yaml $(CHART)/crds/llmaz/
	cp manifests/crds/llmd.ai_*.yaml $(CHART)/crds/llmd/
	cp manifests/crds/volcano/*.yaml $(CHART)/crds/volcano/
	cp manifests/crds/scheduler-plugins/*.yaml $(CHART)/crds/scheduler-plugins/
	cp manifests/crds/lws/*.json $(CHART)/crds/lws/
	cp manifests/scheduler/rbac.yaml $(CHART)/rbac/scheduler.yaml
	cp manifests/controller/rbac.yaml $(CHART)/rbac/controller.yaml
	cp manifests/controller/role.yaml $(CHART)/rbac/controller-role.yaml
	cp manifests/router/rbac.yaml $(CHART)/rbac/router.yaml
	cp manifests/metrics-reader.yaml $(CHART)/rbac/metrics-reader.yaml
	cp manifests/aggregate-roles.yaml $(CHART)/rbac/aggregate-roles.yaml
	if [ -d manifests/components/llmaz-backendruntimes ]; then find manifests/components/llmaz-backendruntimes -name '*.yaml' ! -name kustomization.yaml -exec cp {} $(CHART)/llmaz-backendruntimes/ \; ; fi
	if [ -f manifests/observability/berth-dashboard.json ]; then cp manifests/observability/berth-dashboard.json $(CHART)/; fi

## verify-generated: fail when a generated file is stale (regenerates, then compares checksums)
verify-generated:
	@before=$$(sha256sum $(GENERATED) | sort); \
	$(MAKE) --no-print-directory -s generate manifests >/dev/null; \
	after=$$(sha256sum $$(find pkg/apis -name 'zz_generated.*.go') $$(find manifests/crds -name '*.yaml' -o -name '*.json') $(RBAC_GENERATED) $$(find charts/berth/files -type f) | sort); \
	if [ "$$before" != "$$after" ]; then \
	  echo "generated files are stale; run 'make generate manifests' and commit the result:"; \
	  diff <(echo "$$before") <(echo "$$after") | awk '/^[<>]/ {print "  " $$3}' | sort -u; exit 1; fi

vet:
	$(GO) vet ./...

## test-unit: the packages outside test/. ./pkg/... and ./internal/... run under the race
## detector (the code is concurrent throughout: informers, scrapers, the scheduler's plugins,
## the router's picks); -race needs cgo and a C compiler, which test-deps provides. Without
## it: internal/sandbox (it starts the whole sandbox, whose code is pkg/'s, and its control
## plane did not start in time under -race on this machine), and the benchmark programs,
## hack/ tools, cmd/ mains and docs checks (small runs and builds; their logic is pkg/'s).
MODULE := $(shell $(GO) list -m)
RACE_PACKAGES = $(shell $(GO) list ./pkg/... ./internal/... | grep -v '^$(MODULE)/internal/sandbox$$')
PLAIN_UNIT_PACKAGES = $(shell $(GO) list ./... | grep -v '^$(MODULE)/test/' | grep -v -E '^$(MODULE)/(pkg|internal)/') $(MODULE)/internal/sandbox
test-unit: test-deps
	CGO_ENABLED=1 $(GOTEST) -race -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PACKAGES)
	$(GOTEST) -count=1 -timeout $(TEST_TIMEOUT) $(PLAIN_UNIT_PACKAGES)

## test-integration: test/integration and test/e2e (the sandbox), without -race: each
## package starts an apiserver and etcd, which under the race detector run several times
## slower and would take make test further past 30 minutes. .ci/run adds test-race-integration.
test-integration: test-deps
	$(GOTEST) -count=1 -timeout $(TEST_TIMEOUT) ./test/...

## test-race-integration: the router, gang and autoscale integration packages again under the
## race detector (the router's picks, scrapes, drains and shared state; the gang plugin's
## Permit, preemption and status writers; the autoscalers' reads and writes). .ci/run runs it
## after make test, once per CI run: about 25 minutes on this machine.
RACE_INTEGRATION_PACKAGES = ./test/integration/router ./test/integration/gang ./test/integration/autoscale
test-race-integration: test-deps
	CGO_ENABLED=1 $(GOTEST) -race -count=1 -timeout $(TEST_TIMEOUT) $(RACE_INTEGRATION_PACKAGES)

## test-deps: what the tests need beyond Go. The router's tests start a real redis-server,
## routerbench's smoke test runs nginx (/usr/sbin/nginx) as the router's peer, and the race
## detector (test-unit) needs a C compiler; when one is missing it is installed from
## Debian's package (redis-server, nginx-light, gcc; as root, or with passwordless sudo), or
## make stops naming the one command to run.
test-deps:
	@need() { \
	  command -v "$$1" >/dev/null && return 0; \
	  echo "$$1 is not on the PATH ($$3); installing Debian's $$2 package"; \
	  sudo=; [ "$$(id -u)" -eq 0 ] || sudo="sudo -n"; \
	  pkg="$$2"; install() { $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$$pkg"; }; \
	  if command -v apt-get >/dev/null && { install || { $$sudo apt-get update && install; }; } && command -v "$$1" >/dev/null; then return 0; fi; \
	  echo "make test needs $$1 ($$3): run 'sudo apt-get install $$2' (or your system's package of it), then make test again" >&2; \
	  return 1; \
	}; \
	need redis-server redis-server "the router's tests start a real Redis" && \
	need /usr/sbin/nginx nginx-light "routerbench's smoke test runs nginx as the router's peer" && \
	need "$$($(GO) env CC)" gcc "go test -race needs cgo and a C compiler"

## test: everything CI runs: generated files current, go vet, then the unit packages under
## -race and the integration and end-to-end packages (in that order; make runs a target's
## prerequisites left to right).
test: verify-generated vet test-unit test-integration

clean:
	rm -rf bin
