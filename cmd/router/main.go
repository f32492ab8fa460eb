// Command berth-router is the OpenAI-compatible data plane: it routes inference requests
// to the pods behind ModelRoutes and ModelServers. It scales horizontally; replicas share
// global rate limits through Redis when a ModelRoute asks for it.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/version"
)

func main() {
	var o router.Options
	o.Defaults()
	policy := string(o.Policy)
	flag.StringVar(&o.Addr, "addr", o.Addr, "address of the OpenAI API")
	flag.StringVar(&o.AdminAddr, "admin-addr", ":8081", "address of /metrics, /healthz, /readyz and /version (\"\" disables it)")
	flag.BoolVar(&o.MetricsAuth, "metrics-auth", true, "serve the admin listener over HTTPS and /metrics only to callers the apiserver authenticates and authorizes for GET /metrics")
	flag.StringVar(&o.TLSCertFile, "tls-cert-file", "", "serve the API over HTTPS with this certificate (needs --tls-key-file)")
	flag.StringVar(&o.TLSKeyFile, "tls-key-file", "", "private key of --tls-cert-file")
	flag.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "largest request body accepted (413 beyond)")
	flag.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", o.ReadHeaderTimeout, "time allowed to read a request's headers")
	flag.DurationVar(&o.IdleTimeout, "idle-timeout", o.IdleTimeout, "idle keep-alive connections are closed after this")
	flag.DurationVar(&o.ShutdownDelay, "shutdown-delay", 5*time.Second, "on SIGTERM, how long to go on serving with readiness false, so endpoints drop this replica before it stops taking requests")
	flag.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "after the shutdown delay, time in-flight requests and streams get to finish")
	flag.DurationVar(&o.ScrapeInterval, "scrape-interval", o.ScrapeInterval, "how often each endpoint's /metrics and /v1/models are read")
	flag.StringVar(&policy, "policy", policy, "endpoint picking: \"scored\" (weighted --scorers) or \"round-robin\"")
	flag.StringVar(&o.Scorers, "scorers", o.Scorers, "scorer=weight list: "+pick.LeastRequests+", "+pick.KVCache+", "+pick.PrefixCache+", "+pick.Latency+", "+pick.LoRA)
	showVersion := version.Flag(nil)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Line("berth-router"))
		return
	}
	o.Policy = pick.Policy(policy)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
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
