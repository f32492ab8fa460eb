// Package controlplane runs a real Kubernetes control plane for tests and the
// sandbox: an etcd subprocess (built from the etcd module in go.mod) and an
// in-process kube-apiserver with the apiextensions and aggregator servers,
// with our CRDs installed and ready to use.
//
// Beside the apiserver run the kube-controller-manager loops every cluster
// has and Berth's users rely on: the garbage collector (owner references),
// the namespace controller (deleting a namespace empties it), and the
// Deployment and ReplicaSet controllers (a plain Deployment gets its pods), and
// the ClusterRole aggregation controller (edit and view include Berth's kinds), and
// the disruption controller (PodDisruptionBudgets' status, which the Eviction API reads).
// There is no scheduler and no kubelet: the caller runs those (berth-scheduler,
// the simulated kubelet) when it needs them.
//
// Linux only (flock, Pdeathsig).
package controlplane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
)

const modulePath = "github.com/berth-sh/berth"

// Options configures Start. The zero value is what tests normally want.
type Options struct {
	// CRDDirs are directories whose *.yaml, *.yml and *.json files
	// (recursively, multi-document allowed) hold CustomResourceDefinitions
	// to install before Start returns.
	//
	// nil means DefaultCRDDir(); an empty non-nil slice installs nothing.
	CRDDirs []string

	// APIServerFlags are kube-apiserver command line flags. nil means
	// DefaultAPIServerFlags(); to add flags, append to that.
	APIServerFlags []string

	// NoControllers runs the apiserver alone, without the garbage collector,
	// namespace, Deployment, ReplicaSet and aggregation controllers: for scheduler
	// benchmarks that, like kube-scheduler's scheduler_perf, measure the
	// scheduler against nothing else.
	NoControllers bool
}

// StartupTimings says where Start spent its time.
type StartupTimings struct {
	EtcdBinary  time.Duration // locating (or on a cold cache building) etcd
	Etcd        time.Duration // etcd process start until healthy
	APIServer   time.Duration // kube-apiserver start until healthy
	CRDs        time.Duration // CRD creation until discoverable
	Controllers time.Duration // kube-controller-manager loops constructed and started
	Total       time.Duration
}

// ControlPlane is a running etcd + kube-apiserver. Stop it when done.
type ControlPlane struct {
	logger      klog.Logger
	dir         string // temp dir holding etcd data, logs and apiserver files
	etcd        *etcdProcess
	apiServer   *apiServer
	controllers *controllers
	config      *rest.Config
	timings     StartupTimings

	stopOnce sync.Once
}

// Start starts etcd and kube-apiserver and installs the CRDs in
// opts.CRDDirs. When it returns, the API (including the CRDs) is ready.
//
// ctx bounds startup (including building etcd on a cold cache, which can
// take minutes; the apiserver's own startup waits are bounded separately).
// The control plane runs until Stop is called. The control plane's messages
// go to klog.FromContext(ctx); the apiserver additionally logs through the
// global klog, as it always does.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	start := time.Now()
	logger := klog.FromContext(ctx).WithName("controlplane")

	crdDirs := opts.CRDDirs
	if crdDirs == nil {
		d, err := DefaultCRDDir()
		if err != nil {
			return nil, err
		}
		crdDirs = []string{d}
	}
	// Parse CRDs before starting anything: a broken manifest should fail in
	// milliseconds, not after the apiserver came up.
	crds, err := loadCRDs(crdDirs)
	if err != nil {
		return nil, err
	}
	flags := opts.APIServerFlags
	if flags == nil {
		flags = DefaultAPIServerFlags()
	}

	cp := &ControlPlane{logger: logger}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()

	t := time.Now()
	etcdBin, err := etcdBinary(ctx, logger)
	if err != nil {
		return nil, err
	}
	cp.timings.EtcdBinary = time.Since(t)

	cp.dir, err = os.MkdirTemp("", "berth-controlplane-")
	if err != nil {
		return nil, err
	}

	t = time.Now()
	cp.etcd, err = startEtcd(ctx, logger, etcdBin, cp.dir)
	if err != nil {
		return nil, err
	}
	cp.timings.Etcd = time.Since(t)

	t = time.Now()
	apiserverDir := filepath.Join(cp.dir, "apiserver")
	if err := os.Mkdir(apiserverDir, 0o700); err != nil {
		return nil, err
	}
	cp.apiServer, err = startAPIServer(ctx, logger, cp.etcd.clientURL, flags, apiserverDir)
	if err != nil {
		// The etcd log is deleted with the temp dir; quote it if etcd
		// died, as that is then the likely cause.
		select {
		case <-cp.etcd.exited:
			err = fmt.Errorf("%w\netcd exited (%v), its log ends with:\n%s", err, cp.etcd.waitErr, cp.etcd.logTail(4096))
		default:
		}
		return nil, err
	}
	cp.config = rest.CopyConfig(cp.apiServer.server.ClientConfig)
	cp.timings.APIServer = time.Since(t)

	t = time.Now()
	if err := installCRDs(ctx, logger, cp.config, crds); err != nil {
		return nil, err
	}
	cp.timings.CRDs = time.Since(t)

	if !opts.NoControllers {
		t = time.Now()
		if cp.controllers, err = startControllers(ctx, logger, cp.RESTConfig()); err != nil {
			return nil, fmt.Errorf("starting kube-controller-manager loops: %w", err)
		}
		cp.timings.Controllers = time.Since(t)
	}
	cp.timings.Total = time.Since(start)

	logger.Info("Control plane ready", "host", cp.config.Host, "etcd", cp.etcd.clientURL,
		"crds", len(crds), "duration", cp.timings.Total.Round(time.Millisecond))
	return cp, nil
}

// RESTConfig returns a new copy of the admin client config on every call, so
// callers may tweak QPS, user agent, etc. without affecting each other.
// It authenticates as the apiserver's loopback user (group system:masters).
//
// It speaks JSON: the apiserver's loopback config asks for protobuf, which custom resources
// (Berth's and Volcano's) do not support, and a client built from it fails with an encode
// error on the first CRD object. Callers wanting protobuf for built-in kinds can set it.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	cfg := rest.CopyConfig(cp.config)
	cfg.ContentType, cfg.AcceptContentTypes = "", ""
	return cfg
}

// EtcdURL is etcd's client URL, for tests that inspect storage directly.
func (cp *ControlPlane) EtcdURL() string { return cp.etcd.clientURL }

// EtcdPID is the etcd process id.
func (cp *ControlPlane) EtcdPID() int { return cp.etcd.cmd.Process.Pid }

// EtcdLogPath is the file etcd logs to. It is removed by Stop.
func (cp *ControlPlane) EtcdLogPath() string { return cp.etcd.logPath }

// StartupTimings reports how long each startup phase took.
func (cp *ControlPlane) StartupTimings() StartupTimings { return cp.timings }

// InstallCRDs installs (creating or updating) the CRDs found in dirs, like
// Options.CRDDirs, and waits until they are usable.
func (cp *ControlPlane) InstallCRDs(ctx context.Context, dirs ...string) error {
	crds, err := loadCRDs(dirs)
	if err != nil {
		return err
	}
	return installCRDs(ctx, cp.logger, cp.config, crds)
}

// WriteKubeconfig writes a kubeconfig for kubectl and other tools. It
// embeds the apiserver's CA and bearer token, so it is only valid while this
// control plane runs, and is written with mode 0600.
func (cp *ControlPlane) WriteKubeconfig(path string) error {
	c := cp.config
	const name = "berth"
	cluster := clientcmdapi.NewCluster()
	cluster.Server = c.Host
	cluster.CertificateAuthorityData = c.CAData
	cluster.CertificateAuthority = c.CAFile
	// The loopback serving certificate is issued for this SNI name, not for
	// 127.0.0.1, so clients must send and verify it.
	cluster.TLSServerName = c.ServerName
	user := clientcmdapi.NewAuthInfo()
	user.Token = c.BearerToken
	user.ClientCertificateData = c.CertData
	user.ClientKeyData = c.KeyData
	kctx := clientcmdapi.NewContext()
	kctx.Cluster = name
	kctx.AuthInfo = name

	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = cluster
	kc.AuthInfos[name] = user
	kc.Contexts[name] = kctx
	kc.CurrentContext = name
	return clientcmd.WriteToFile(*kc, path)
}

// Stop shuts down the apiserver, then etcd (SIGTERM, then SIGKILL after a
// grace period), and removes all temporary files. It is idempotent and safe
// on a partially started control plane.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		start := time.Now()
		// Controllers first: they watch the apiserver, which would otherwise wait for
		// their watches to end before it shuts down.
		if cp.controllers != nil {
			cp.controllers.stop(cp.logger)
		}
		// Apiserver before etcd: it holds etcd connections and would log errors
		// (and retry) if etcd vanished under it.
		if cp.apiServer != nil {
			cp.apiServer.stop()
		}
		apiServerDone := time.Now()
		if cp.etcd != nil {
			cp.etcd.stop(cp.logger)
		}
		etcdDone := time.Now()
		if cp.dir != "" {
			if err := os.RemoveAll(cp.dir); err != nil {
				cp.logger.Error(err, "Removing control plane temp dir", "dir", cp.dir)
			}
		}
		cp.logger.V(1).Info("Control plane stopped",
			"apiserver", apiServerDone.Sub(start).Round(time.Millisecond),
			"etcd", etcdDone.Sub(apiServerDone).Round(time.Millisecond))
	})
}

// DefaultCRDDir is <module root>/manifests/crds, which holds our CRDs and,
// under volcano/, the Volcano CRDs we depend on.
func DefaultCRDDir() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("locating default CRD dir (set Options.CRDDirs): %w", err)
	}
	return filepath.Join(root, "manifests", "crds"), nil
}

// moduleRoot finds the source tree of this module: first from where this
// file was compiled (works for any cwd under `go test`), then by walking up
// from the working directory (binaries built with -trimpath).
func moduleRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			if isModuleRoot(dir) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("no go.mod for module " + modulePath + " found above the package source or working directory")
}

func isModuleRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == modulePath
		}
	}
	return false
}
