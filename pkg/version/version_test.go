package version

import (
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStamped(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "ffff"}, {Key: "vcs.time", Value: "2000-01-01T00:00:00Z"}}}
	i := get("v0.1.0", "0123456789abcdef0123456789abcdef01234567", "2026-01-02T15:04:05Z", bi)
	assert.Equal(t, Info{Version: "v0.1.0", GitCommit: "0123456789abcdef0123456789abcdef01234567", BuildDate: "2026-01-02T15:04:05Z",
		GoVersion: "go1.26.8", Platform: runtime.GOOS + "/" + runtime.GOARCH}, i, "the stamp wins over what the toolchain recorded")
	assert.Equal(t, "v0.1.0 (commit 0123456789ab, built 2026-01-02T15:04:05Z, go1.26.8, "+runtime.GOOS+"/"+runtime.GOARCH+")", i.String())
}

// Unstamped (go run, go test, a plain go build): Dev, and the commit and its time when the
// toolchain recorded them.
func TestUnstamped(t *testing.T) {
	i := get("", "", "", nil)
	assert.Equal(t, Dev, i.Version)
	assert.Equal(t, runtime.Version(), i.GoVersion)
	assert.Equal(t, "v0.0.0-dev (commit unknown, "+runtime.Version()+", "+runtime.GOOS+"/"+runtime.GOARCH+")", i.String())

	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-01-02T15:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	i = get("", "", "", bi)
	assert.Equal(t, Dev, i.Version)
	assert.Equal(t, "0123456789abcdef0123456789abcdef01234567-dirty", i.GitCommit)
	assert.Equal(t, "2026-01-02T15:04:05Z", i.BuildDate)
	assert.Contains(t, i.String(), "(commit 0123456789ab-dirty, built 2026-01-02T15:04:05Z, go1.26.8, ")
}

// This test binary is unstamped.
func TestGet(t *testing.T) {
	i := Get()
	assert.Equal(t, Dev, i.Version)
	assert.Equal(t, runtime.Version(), i.GoVersion)
	assert.Equal(t, "berth-test "+i.String(), Line("berth-test"))
	kv := i.KeysAndValues()
	require.Len(t, kv, 10)
	assert.Equal(t, []any{"version", Dev}, kv[:2])
}

func TestFlag(t *testing.T) {
	fs := flag.NewFlagSet("berth-test", flag.ContinueOnError)
	v := Flag(fs)
	require.NoError(t, fs.Parse(nil))
	assert.False(t, *v)
	require.NoError(t, fs.Parse([]string{"--version"}))
	assert.True(t, *v)
}

func TestDependency(t *testing.T) {
	bi := &debug.BuildInfo{Deps: []*debug.Module{
		{Path: "k8s.io/kubernetes", Version: "v1.37.1"},
		{Path: "k8s.io/api", Version: "v0.0.0", Replace: &debug.Module{Path: "k8s.io/api", Version: "v0.37.1"}},
	}}
	assert.Equal(t, "v1.37.1", dependency(bi, "k8s.io/kubernetes"))
	assert.Equal(t, "v0.37.1", dependency(bi, "k8s.io/api"), "a replaced module reports its replacement")
	assert.Empty(t, dependency(bi, "example.com/absent"))
	// A test binary's build information lists no modules; the image test runs the real
	// berth-scheduler, which reports its k8s.io/kubernetes.
	assert.Empty(t, Dependency("example.com/absent"))
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var got map[string]string
	require.NoError(t, json.Unmarshal(body, &got))
	assert.Equal(t, map[string]string{"version": Dev, "gitCommit": Get().GitCommit, "buildDate": Get().BuildDate,
		"goVersion": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH}, got)
}

// The VERSION file at the repository root is the one place the release is written: a
// SemVer 2.0 version with a leading v, on one line.
func TestVersionFile(t *testing.T) {
	raw, err := os.ReadFile("../../VERSION")
	require.NoError(t, err)
	v := string(raw)
	require.True(t, strings.HasSuffix(v, "\n") && strings.Count(v, "\n") == 1, "VERSION is one line ending in a newline: %q", v)
	assert.Regexp(t, semver, strings.TrimSpace(v))
	assert.Regexp(t, semver, Dev)
}

// SemVer 2.0's regular expression (semver.org), with the leading v Go modules and image tags use.
var semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)
