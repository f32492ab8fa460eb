package sandbox

import (
	"flag"
	"strconv"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// ConfigureLogging sets the process-wide logging of the components the sandbox runs in
// process (kube-apiserver, berth-scheduler, berth-controller). At verbosity 0 their logs are
// dropped, so the sandbox's own progress and placement table are all a user sees; from 1
// on, they go to stderr with klog's -v set to verbosity.
func ConfigureLogging(verbosity int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if verbosity <= 0 {
		// A logger replaces klog's own output entirely (files, stderr and its threshold for
		// errors), so nothing the apiserver or the scheduler says reaches the terminal.
		klog.SetLogger(logr.Discard())
	} else {
		_ = fs.Set("v", strconv.Itoa(verbosity))
	}
	// controller-runtime logs through klog, so one switch governs both.
	ctrllog.SetLogger(klog.Background())
}
