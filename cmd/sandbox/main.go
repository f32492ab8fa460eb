// Command sandbox runs the whole of Berth on one machine: etcd and kube-apiserver, a
// simulated leaf/spine fabric of GPU nodes (device-plugin and DRA GPUs), the simulated
// kubelet, DRA driver and engines,
// berth-scheduler, berth-controller and berth-router, all in process. It applies examples/,
// shows the ModelServings coming up, prints where every pod landed, answers a chat
// completion through the router for every routed model, then runs until interrupted (or,
// with --once, exits).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/pkg/sim"
	"github.com/berth-sh/berth/pkg/version"
)

func main() {
	o := sandbox.Options{Fabric: sandbox.DefaultFabric(), Load: sandbox.Load{Every: 5 * time.Second}}
	// Its own flag set: controller-runtime registers --kubeconfig on the global one.
	flag := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	flag.IntVar(&o.Fabric.Spines, "spines", o.Fabric.Spines, "spine switches (tier-2 HyperNodes)")
	flag.IntVar(&o.Fabric.LeavesPerSpine, "leaves-per-spine", o.Fabric.LeavesPerSpine, "leaf switches under each spine (tier-1 HyperNodes)")
	flag.IntVar(&o.Fabric.NodesPerLeaf, "nodes-per-leaf", o.Fabric.NodesPerLeaf, "GPU nodes under each leaf")
	flag.IntVar(&o.Fabric.GPUsPerNode, "gpus-per-node", o.Fabric.GPUsPerNode, "nvidia.com/gpu on each node")
	flag.Func("gpu-products", fmt.Sprintf("GPU products given to the spines in turn, comma-separated, from %s (default %q; \"\" for unlabelled GPUs)",
		strings.Join(sim.GPUProductNames(), ", "), strings.Join(o.Fabric.GPUProducts, ",")), func(v string) error {
		o.Fabric.GPUProducts = nil
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.Fabric.GPUProducts = append(o.Fabric.GPUProducts, p)
			}
		}
		return nil
	})
	flag.IntVar(&o.Fabric.NodesPerNVLink, "nodes-per-nvlink", o.Fabric.NodesPerNVLink, "group each leaf's nodes into NVLink domains of this many nodes (nvidia.com/gpu.clique labels, tier-1 HyperNodes; leaf and spine move up to tiers 2 and 3); 0 for none")
	nvl72 := flag.Bool("nvl72", false, "a fabric of GB200 NVL72 racks instead: 2 spines × 2 racks, each rack a leaf and one NVLink domain of 18 nodes × 4 GPUs (the fabric flags above, when given, change it); apply examples/nvl72")
	draSet := false
	flag.Func("dra-gpus", "leaves or spines (comma-separated, e.g. leaf-3 or spine-1) whose nodes publish their GPUs through the simulated gpu.nvidia.com DRA driver instead of the nvidia.com/gpu device plugin (default: the fabric's last leaf, none with --nvl72; \"\" for none)", func(v string) error {
		draSet, o.DRAGPUs = true, nil
		for _, d := range strings.Split(v, ",") {
			if d = strings.TrimSpace(d); d != "" {
				o.DRAGPUs = append(o.DRAGPUs, d)
			}
		}
		return nil
	})
	flag.IntVar(&o.PlainNodes, "plain-nodes", 0, "instead of the GPU fabric, this many workers without GPUs or network tiers, like kind's (for test/e2e: BERTH_E2E=1 KUBECONFIG=<--kubeconfig> go test ./test/e2e)")
	flag.StringVar(&o.ExamplesDir, "examples", "examples", "directory of manifests to apply (every YAML document, server-side)")
	flag.StringVar(&o.Kubeconfig, "kubeconfig", "sandbox.kubeconfig", "kubeconfig to write for kubectl while the sandbox runs (\"\" writes none)")
	flag.BoolVar(&o.Once, "once", false, "exit 0 once every ModelServing is Available, non-zero with the reason after --timeout")
	flag.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "how long the ModelServings may take to become Available")
	flag.DurationVar(&o.PodStartDelay, "pod-start-delay", time.Second, "how long the simulated kubelet takes to start a bound pod")
	flag.StringVar(&o.RouterAddr, "router-addr", "127.0.0.1:8080", "where berth-router serves the OpenAI API")
	flag.Float64Var(&o.EngineTimeScale, "engine-time-scale", 1, "simulated engines' speed: 1 answers as fast as a real GPU would, 0.01 a hundred times faster")
	flag.IntVar(&o.Load.Concurrency, "load", 0, "once everything is Available, keep up to this many streaming chat completions in flight through the router (ramping up, holding, ramping down over --load-duration) and print the autoscaled replicas as they change; 0 sends no load")
	flag.DurationVar(&o.Load.Duration, "load-duration", 2*time.Minute, "how long --load sends requests (then the sandbox watches as long again for scale-down)")
	flag.IntVar(&o.Load.MaxTokens, "load-max-tokens", 128, "output tokens per --load request")
	flag.DurationVar(&o.VariantSyncPeriod, "variant-sync-period", 5*time.Second, "how often each VariantAutoscaling is sized (berth-controller's default is 30s)")
	flag.DurationVar(&o.AutoscaleSyncPeriod, "autoscale-sync-period", 5*time.Second, "how often the autoscaler reads metrics and decides (berth-controller's default)")
	verbosity := flag.Int("v", 0, "log verbosity of the in-process components (0 keeps their logs off)")
	showVersion := version.Flag(flag)
	_ = flag.Parse(os.Args[1:])
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sandbox: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *nvl72 {
		o.Fabric = nvl72Fabric(flag, o.Fabric)
	}
	if !draSet && !*nvl72 {
		o.DRAGPUs = sandbox.DefaultDRAGPUs(o.Fabric)
	}
	fmt.Println(version.Line("berth-sandbox"))
	if *showVersion {
		return
	}
	sandbox.ConfigureLogging(*verbosity)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal the sandbox shuts down cleanly; a second one kills it.
	go func() { <-ctx.Done(); stop() }()
	if err := sandbox.Run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		os.Exit(1)
	}
}

// nvl72Fabric is the NVL72 fabric with the fabric flags given on the command line applied
// over it ("--nvl72 --spines 1" is one spine of two racks).
func nvl72Fabric(fs *flag.FlagSet, given sim.Fabric) sim.Fabric {
	f := sandbox.NVL72Fabric()
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "spines":
			f.Spines = given.Spines
		case "leaves-per-spine":
			f.LeavesPerSpine = given.LeavesPerSpine
		case "nodes-per-leaf":
			f.NodesPerLeaf = given.NodesPerLeaf
		case "nodes-per-nvlink":
			f.NodesPerNVLink = given.NodesPerNVLink
		case "gpus-per-node":
			f.GPUsPerNode = given.GPUsPerNode
		case "gpu-products":
			f.GPUProducts = given.GPUProducts
		}
	})
	return f
}
