// Package version is Berth's own version: the release in the repository's VERSION file, the
// commit and the commit's time, stamped into every binary at link time:
//
//	go build -ldflags "-X github.com/berth-sh/berth/pkg/version.Version=v0.1.0 \
//	  -X github.com/berth-sh/berth/pkg/version.GitCommit=$(git rev-parse HEAD) \
//	  -X github.com/berth-sh/berth/pkg/version.BuildDate=2026-01-02T15:04:05Z" ./cmd/router
//
// The Makefile (make binaries), the image build (hack/imagebuild, make images) and the
// Dockerfile all stamp it this way. A binary built without the stamp (go run, go test, a
// plain go build) reports Dev and whatever the Go toolchain recorded about the commit.
//
// It is not k8s.io/component-base/version: kube-scheduler derives its binary version,
// emulation version and feature-gate defaults from that one, so berth-scheduler leaves it
// alone and reports the kube-scheduler release it embeds beside Berth's version.
package version

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time (-ldflags -X); read them through Get.
var (
	// Version is the SemVer release, "v0.1.0", from the VERSION file.
	Version string
	// GitCommit is the full commit hash the binary was built from.
	GitCommit string
	// BuildDate is the commit's time (SOURCE_DATE_EPOCH) in RFC 3339, UTC: the time of the
	// source, not of the build, so rebuilding one commit gives the same bytes.
	BuildDate string
)

// Dev is the version of a binary built without the stamp.
const Dev = "v0.0.0-dev"

// Info is what a binary reports about itself: --version prints its String, berth-router's
// /version serves it as JSON.
type Info struct {
	Version   string `json:"version"`
	GitCommit string `json:"gitCommit"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns this binary's version: the link-time stamp, or, unstamped, Dev with the
// commit and time the Go toolchain recorded (go build in a git checkout with -buildvcs).
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(Version, GitCommit, BuildDate, bi)
}

func get(version, commit, date string, bi *debug.BuildInfo) Info {
	i := Info{Version: version, GitCommit: commit, BuildDate: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if i.Version == "" {
		i.Version = Dev
	}
	if bi == nil {
		return i
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if i.GitCommit == "" && vcs["vcs.revision"] != "" {
		i.GitCommit = vcs["vcs.revision"]
		if vcs["vcs.modified"] == "true" {
			i.GitCommit += "-dirty"
		}
	}
	if i.BuildDate == "" {
		i.BuildDate = vcs["vcs.time"]
	}
	return i
}

// String is one line: "v0.1.0 (commit 0123456789ab, built 2026-01-02T15:04:05Z, go1.26.8, linux/amd64)".
func (i Info) String() string {
	commit, dirty := strings.CutSuffix(i.GitCommit, "-dirty")
	switch {
	case commit == "":
		commit = "unknown"
	case len(commit) > 12:
		commit = commit[:12]
	}
	if dirty {
		commit += "-dirty"
	}
	parts := []string{"commit " + commit}
	if i.BuildDate != "" {
		parts = append(parts, "built "+i.BuildDate)
	}
	parts = append(parts, i.GoVersion, i.Platform)
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(parts, ", "))
}

// KeysAndValues are the fields for a structured log line (logr, klog):
// log.Info("starting", version.Get().KeysAndValues()...).
func (i Info) KeysAndValues() []any {
	return []any{"version", i.Version, "gitCommit", i.GitCommit, "buildDate", i.BuildDate, "goVersion", i.GoVersion, "platform", i.Platform}
}

// Line is what --version prints: the program's name and its version.
func Line(program string) string {
	return program + " " + Get().String()
}

// Flag registers --version on fs (flag.CommandLine when nil). After parsing, a true value
// means: print Line and exit 0, before anything needs a cluster.
func Flag(fs *flag.FlagSet) *bool {
	if fs == nil {
		fs = flag.CommandLine
	}
	return fs.Bool("version", false, "print the version and exit")
}

// Dependency is the version of module path linked into this binary ("" when it is not, or
// the binary carries no build information): berth-scheduler reports the k8s.io/kubernetes
// release whose kube-scheduler it embeds.
func Dependency(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return dependency(bi, path)
}

func dependency(bi *debug.BuildInfo, path string) string {
	for _, d := range bi.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil && d.Replace.Version != "" {
			return d.Replace.Version
		}
		return d.Version
	}
	return ""
}

// Handler serves Get as JSON (berth-router's GET /version on its admin listener).
func Handler() http.Handler {
	body, _ := json.Marshal(Get())
	body = append(body, '\n')
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
}
