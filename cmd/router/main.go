// Command berth-router is the OpenAI-compatible data plane: it routes inference requests
// to the pods behind ModelRoutes and ModelServers. It scales horizontally; replicas share
// global rate limits through Redis when a ModelRoute asks for it.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/fairqueue"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/version"
)

// flags is berth-router's command line.
type flags struct {
	opts        router.Options
	policy      string
	showVersion *bool
	zap         zap.Options
}

// bindFlags defines the command line on fs; docs/flags.md is generated from it.
func bindFlags(fs *flag.FlagSet) *flags {
	f := &flags{}
	o := &f.opts
	o.Defaults()
	f.policy = string(o.Policy)
	fs.StringVar(&o.Mode, "mode", o.Mode, "\"proxy\": serve the OpenAI API and proxy requests; \"epp\": be an endpoint picker Envoy asks over ext_proc (the Gateway API Inference Extension's protocol), with the same routes, scorers and rate limits")
	fs.StringVar(&o.Addr, "addr", o.Addr, "address of the OpenAI API (proxy mode)")
	fs.StringVar(&o.EPPAddr, "epp-addr", o.EPPAddr, "address of the ext_proc gRPC service (epp mode)")
	fs.StringVar(&o.EPPHealthAddr, "epp-health-addr", o.EPPHealthAddr, "address of the gRPC health service: liveness, readiness and envoy.service.ext_proc.v3.ExternalProcessor (epp mode)")
	fs.BoolVar(&o.EPPSecureServing, "epp-secure-serving", true, "serve ext_proc over TLS, as gateways expect of an endpoint picker: --tls-cert-file/--tls-key-file when set, else a self-signed certificate (epp mode)")
	fs.StringVar(&o.EPPPool, "epp-pool", o.EPPPool, "namespace/name of the InferencePool whose Ready pods the picker chooses among, as the Inference Extension runs one picker per pool (epp mode); empty: match the request's model to a ModelRoute as the proxy does")
	fs.IntVar(&o.EPPFallbacks, "epp-fallbacks", 2, "endpoints named after the primary, in the order the data plane tries them when the one before fails (epp mode)")
	fs.StringVar(&o.AdminAddr, "admin-addr", ":8081", "address of /metrics, /healthz, /readyz and /version (\"\" disables it)")
	fs.BoolVar(&o.MetricsAuth, "metrics-auth", true, "serve the admin listener over HTTPS and /metrics only to callers the apiserver authenticates and authorizes for GET /metrics")
	fs.Func("gateway-addresses", "comma-separated addresses (IPs or DNS names) where clients reach the Gateway listeners, such as the router Service's; written into every Programmed Gateway's status.addresses", func(v string) error {
		o.GatewayAddresses = splitList(v)
		return nil
	})
	fs.StringVar(&o.RedisAddr, "redis-addr", "", "Redis (host:port) for the global rate limits of ModelRoutes whose rateLimit.global names no Redis of its own, and through which the replicas share their prefix index and in-flight counts (see --shared-state)")
	fs.BoolFunc("shared-state", "share the prefix index and in-flight counts with the other replicas through --redis-addr (default true; =false keeps them to this replica)", func(v string) error {
		on, err := strconv.ParseBool(v)
		o.DisableSharedState = !on
		return err
	})
	fs.StringVar(&o.Tracing.Endpoint, "otlp-endpoint", "", "export OpenTelemetry trace spans over OTLP/gRPC to this collector (host:port, or an http:// or https:// URL); empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, and with neither no spans are made (OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG choose the sampler)")
	fs.BoolVar(&o.Tracing.Insecure, "otlp-insecure", false, "send spans to a host:port --otlp-endpoint without TLS")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "", "serve the API over HTTPS with this certificate (needs --tls-key-file)")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", "", "private key of --tls-cert-file; both are read again when either changes on disk (a rotated Secret), so new connections get the new certificate without a restart")
	fs.StringVar(&o.UpstreamCAFile, "upstream-ca-file", "", "PEM bundle of the CAs that sign the certificates of ModelServers served over https (workloadPort protocol https), in place of the system roots; read again when it changes on disk")
	fs.BoolVar(&o.EndpointHeader, "endpoint-header", false, "add X-Berth-Endpoint (namespace/pod, or the provider, that served) to every answer; it discloses pod names to clients, so it is for debugging and demos")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "largest request body accepted (413 beyond)")
	fs.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", o.ReadHeaderTimeout, "time allowed to read a request's headers")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", o.IdleTimeout, "idle keep-alive connections are closed after this")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", 5*time.Second, "on SIGTERM, how long to go on serving with readiness false, so endpoints drop this replica before it stops taking requests")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "after the shutdown delay, time in-flight requests and streams get to finish")
	fs.DurationVar(&o.ScrapeInterval, "scrape-interval", o.ScrapeInterval, "how often each endpoint's /metrics and /v1/models are read")
	fs.StringVar(&f.policy, "policy", f.policy, "endpoint picking: \"scored\" (weighted --scorers) or \"round-robin\"")
	fs.StringVar(&o.Scorers, "scorers", o.Scorers, "scorer=weight list: "+pick.LeastRequests+", "+pick.KVCache+", "+pick.PrefixCache+", "+pick.Latency+", "+pick.LoRA)
	fs.StringVar(&o.Auth, "auth", o.Auth, "\"none\": serve every caller (the sandbox's default); \"api-key\": callers send an API key (Authorization: Bearer, or x-api-key on /v1/messages) held in a Secret labelled berth.sh/router-api-key=true, whose berth.sh/tenant label names their tenant (docs/router.md)")
	fs.Func("api-key-namespaces", "comma-separated namespaces whose API key Secrets are read (--auth=api-key); \"*\" every namespace; default the router's own", func(v string) error {
		o.APIKeyNamespaces = splitList(v)
		return nil
	})
	fs.IntVar(&o.QueueConcurrency, "queue-concurrency", 0, "requests sent at once to each Ready endpoint of a ModelServer (less what other replicas send); beyond it requests wait in a fair queue shared by tokens between tenants. 0: no queue")
	fs.Func("queue-policy", "order of waiting requests: \"fair\" (start-time fair queueing by tokens between tenants) or \"fifo\" (default fair)", func(v string) error {
		o.QueuePolicy = fairqueue.Policy(v)
		return nil
	})
	fs.BoolVar(&o.QueueReserve, "queue-reserve", false, "keep one slot of a saturated ModelServer free for each recently active tenant that holds none, so its next request does not wait for another tenant's to end (the slot idles meanwhile)")
	fs.IntVar(&o.QueueSize, "queue-size", o.QueueSize, "requests that may wait for one ModelServer (503 beyond)")
	fs.DurationVar(&o.QueueTimeout, "queue-timeout", o.QueueTimeout, "how long a request may wait in the queue (then 503 with Retry-After)")
	fs.Func("hold-queue-size", "requests held for one ModelServer whose ModelServing is at zero replicas while the autoscaler brings it up (then 503 with Retry-After); 0 refuses them at once, still telling the autoscaler (default 100)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q: want a count, 0 or more", v)
		}
		o.HoldQueueSize, o.DisableHold = n, n == 0
		return nil
	})
	fs.BoolFunc("deletion-cost", "write on each ModelServing pod the router sends to the cost of losing it (its in-flight requests and prefix cache, as a log2 bucket) as controller.kubernetes.io/pod-deletion-cost, so a scale-down removes the group that costs least (default true; =false leaves the annotation to you)", func(v string) error {
		on, err := strconv.ParseBool(v)
		o.DisableDeletionCost = !on
		return err
	})
	fs.DurationVar(&o.DeletionCostInterval, "deletion-cost-interval", o.DeletionCostInterval, "how often at most this replica writes one pod's deletion cost (only when its bucket changed)")
	fs.DurationVar(&o.HoldTimeout, "hold-timeout", o.HoldTimeout, "how long a request may be held for a model coming up from zero replicas (then 503 with Retry-After)")
	fs.BoolFunc("pd-topology", "pair each prefill endpoint with the nearest decode endpoint that has room (the same node, then NVLink domain, leaf, ...), read from HyperNodes or --fabric-label-tiers; needs list/watch on Nodes (default true; =false pairs by load alone)", func(v string) error {
		on, err := strconv.ParseBool(v)
		o.DisablePDTopology = !on
		return err
	})
	fs.Func("fabric-label-tiers", "name=label list of the node labels the fabric is read from where no HyperNode exists, lowest tier first, as berth-scheduler's nodeLabelTiers (default "+fabric.FormatLabelTiers(fabric.DefaultLabelTiers)+")", func(v string) error {
		tiers, err := fabric.ParseLabelTiers(v)
		if err == nil && len(tiers) == 0 {
			err = fmt.Errorf("%q names no tier; to read no fabric, set --pd-topology=false", v)
		}
		o.FabricLabelTiers = tiers
		return err
	})
	f.showVersion = version.Flag(fs)
	f.zap.BindFlags(fs)
	config.RegisterFlags(fs) // --kubeconfig, as controller-runtime registers it
	return f
}

// splitList is a comma-separated flag's values, blanks dropped.
func splitList(v string) []string {
	var out []string
	for a := range strings.SplitSeq(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// serviceAccountNamespace is where the kubelet writes the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// apiKeyNamespaces resolves --api-key-namespaces: "*" is every namespace, none the
// router's own (read from its service account; every namespace when not in a pod).
func apiKeyNamespaces(ns []string) []string {
	if len(ns) == 1 && ns[0] == "*" {
		return nil
	}
	if len(ns) == 0 {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil && strings.TrimSpace(string(b)) != "" {
			return []string{strings.TrimSpace(string(b))}
		}
	}
	return ns
}

func main() {
	f := bindFlags(flag.CommandLine)
	flag.Parse()
	o := f.opts
	if *f.showVersion {
		fmt.Println(version.Line("berth-router"))
		return
	}
	o.Policy = pick.Policy(f.policy)
	o.APIKeyNamespaces = apiKeyNamespaces(o.APIKeyNamespaces)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	log := ctrl.Log.WithName("berth-router")
	log.Info("starting berth-router", version.Get().KeysAndValues()...)

	r, err := router.New(ctrl.GetConfigOrDie(), o, log)
	if err != nil {
		log.Error(err, "setup failed")
		os.Exit(1)
	}
	if err := r.Run(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "router stopped")
		os.Exit(1)
	}
}
