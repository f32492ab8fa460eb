package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const root = "../.."

// The images are built twice from one build of the binaries and come out identical; then
// each is read back from what was written, as a runtime would: docker load's archive and
// the OCI layout crane push reads, the config's user, entrypoint and labels, the files of
// its layer, and the binary itself run with --version on this machine. Building the three
// binaries is the slow part (a few minutes with a cold build cache); -short skips it.
func TestImages(t *testing.T) {
	if testing.Short() {
		// make test (and so CI) never passes -short: there this test always runs.
		t.Skip("-short: builds the three binaries (make test runs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	stamp, err := ResolveStamp(ctx, root, Stamp{Epoch: -1})
	require.NoError(t, err)
	bins := t.TempDir()
	start := time.Now()
	require.NoError(t, BuildBinaries(ctx, root, bins, runtime.GOARCH, stamp, Binaries))
	t.Logf("binaries built in %s", time.Since(start).Round(time.Second))

	build := func() []Built {
		built, err := Build(ctx, Options{Root: root, Out: t.TempDir(), Arch: runtime.GOARCH, Stamp: stamp, BinDir: bins})
		require.NoError(t, err)
		require.Len(t, built, len(Binaries))
		return built
	}
	first, second := build(), build()
	for i, b := range Binaries {
		assert.Equal(t, first[i].Digest, second[i].Digest, "%s: two builds, two digests", b.Name)
		assert.Equal(t, sha256File(t, first[i].Archive), sha256File(t, second[i].Archive), "%s: two builds, two docker-archives", b.Name)
		t.Logf("%s %s: %.1f MB compressed, %.1f MB unpacked", first[i].Ref, first[i].Digest, float64(first[i].CompressedSize)/1e6, float64(first[i].UnpackedSize)/1e6)
	}
	for i, b := range Binaries {
		t.Run(b.Name, func(t *testing.T) { checkImage(t, b, first[i], stamp) })
	}
}

func checkImage(t *testing.T, b Binary, w Built, stamp Stamp) {
	ref, err := name.NewTag(DefaultRegistry + "/" + b.Name + ":" + stamp.Version)
	require.NoError(t, err)
	assert.Equal(t, ref, w.Ref)

	// The OCI layout holds this image alone, under its tag (crane push needs exactly one).
	idx, err := layout.ImageIndexFromPath(w.Layout)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1)
	assert.Equal(t, w.Digest, im.Manifests[0].Digest)
	assert.Equal(t, stamp.Version, im.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	img, err := idx.Image(w.Digest)
	require.NoError(t, err)

	// The docker-archive names the tag and holds the same config and layer.
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(w.Archive) })
	require.NoError(t, err)
	require.Len(t, m, 1)
	assert.Equal(t, []string{ref.String()}, m[0].RepoTags)
	loaded, err := tarball.ImageFromPath(w.Archive, &ref)
	require.NoError(t, err)
	assertSameContent(t, img, loaded)

	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "linux", cf.OS)
	assert.Equal(t, runtime.GOARCH, cf.Architecture)
	assert.Equal(t, "65532:65532", cf.Config.User, "non-root, numeric")
	assert.Equal(t, []string{"/berth"}, cf.Config.Entrypoint)
	assert.Empty(t, cf.Config.Cmd)
	assert.Equal(t, stamp.Time(), cf.Created.UTC())
	assert.Equal(t, map[string]string{
		"org.opencontainers.image.title":    b.Name,
		"org.opencontainers.image.version":  stamp.Version,
		"org.opencontainers.image.revision": stamp.Commit,
		"org.opencontainers.image.source":   "https://github.com/berth-sh/berth",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}, cf.Config.Labels)
	for _, h := range cf.History {
		assert.Equal(t, stamp.Time(), h.Created.UTC())
	}

	// The file system, in its one layer: the binary and the CA bundle, nothing else (no shell).
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	fs, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer fs.Close()
	files := map[string]*tar.Header{}
	var binary, ca []byte
	tr := tar.NewReader(fs)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		files[h.Name] = h
		assert.Equal(t, stamp.Time(), h.ModTime.UTC(), h.Name)
		assert.Zero(t, h.Uid, h.Name)
		assert.Zero(t, h.Gid, h.Name)
		switch h.Name {
		case "berth":
			binary, err = io.ReadAll(tr)
		case "etc/ssl/certs/ca-certificates.crt":
			ca, err = io.ReadAll(tr)
		}
		require.NoError(t, err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	assert.ElementsMatch(t, []string{"berth", "etc/", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt"}, names)
	assert.NotContains(t, files, "bin/sh")
	entry := files["berth"]
	require.NotNil(t, entry, "the entrypoint is in the layer")
	assert.Equal(t, byte(tar.TypeReg), entry.Typeflag)
	assert.Equal(t, int64(0o755), entry.Mode, "executable by the image's user, writable only by root")
	pool := x509.NewCertPool()
	assert.True(t, pool.AppendCertsFromPEM(ca), "the CA bundle parses")
	assert.Greater(t, strings.Count(string(ca), "BEGIN CERTIFICATE"), 100)

	// The binary: static, built without local paths, and stamped.
	dir := t.TempDir()
	path := filepath.Join(dir, b.Name)
	require.NoError(t, os.WriteFile(path, binary, 0o755))
	info, err := buildinfo.ReadFile(path)
	require.NoError(t, err)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	assert.Equal(t, "0", settings["CGO_ENABLED"])
	assert.Equal(t, "true", settings["-trimpath"])
	assert.Equal(t, "linux", settings["GOOS"])
	if runtime.GOOS != "linux" {
		// CI runs on linux, where the binaries are run; elsewhere only their build info is checked.
		t.Skipf("the images' binaries run on linux, this is %s (CI, on linux, runs them)", runtime.GOOS)
	}
	cmd := exec.Command(path, "--version")
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "KUBECONFIG=" + filepath.Join(dir, "none")}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s --version: %s", b.Name, out)
	short := stamp.Commit
	if len(short) > 12 {
		short = short[:12]
	}
	want := b.Name + " " + stamp.Version + " (commit " + short + ", built " + stamp.Time().Format(time.RFC3339) + ", " + info.GoVersion + ", linux/" + runtime.GOARCH + ")\n"
	if b.Name == "berth-scheduler" {
		want += "kube-scheduler " + depVersion(info, "k8s.io/kubernetes") + "\n"
	}
	assert.Equal(t, want, string(out))
}

// assertSameContent: a and b have the same config and layers (docker load reads the archive
// into the image the OCI layout holds, whatever manifest it writes for it).
func assertSameContent(t *testing.T, a, b v1.Image) {
	t.Helper()
	ca, err := a.ConfigName()
	require.NoError(t, err)
	cb, err := b.ConfigName()
	require.NoError(t, err)
	assert.Equal(t, ca, cb, "config")
	la, err := a.Layers()
	require.NoError(t, err)
	lb, err := b.Layers()
	require.NoError(t, err)
	require.Len(t, lb, len(la))
	for i := range la {
		da, err := la[i].DiffID()
		require.NoError(t, err)
		db, err := lb[i].DiffID()
		require.NoError(t, err)
		assert.Equal(t, da, db, "layer %d", i)
	}
}

func depVersion(info *buildinfo.BuildInfo, path string) string {
	for _, d := range info.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return "(not linked)"
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// The Makefile's binaries (make binaries, which the Dockerfile runs) are linked with the
// same flags as the images' binaries.
func TestMakefileStampsAlike(t *testing.T) {
	// make is required: make test, which CI runs, is a make target.
	_, err := exec.LookPath("make")
	require.NoError(t, err, "make test needs make")
	out, err := exec.Command("make", "-C", root, "-s", "-n", "--no-print-directory", "bin/berth-router",
		"GIT_COMMIT=0123456789abcdef", "SOURCE_DATE_EPOCH=1700000000").CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := strings.TrimSpace(string(out))
	version, err := os.ReadFile(filepath.Join(root, "VERSION"))
	require.NoError(t, err)
	want := Stamp{Version: strings.TrimSpace(string(version)), Commit: "0123456789abcdef", Epoch: 1700000000}
	assert.True(t, strings.HasPrefix(cmd, "CGO_ENABLED=0 "), cmd)
	assert.True(t, strings.HasSuffix(cmd, " build -trimpath -ldflags '"+want.LDFlags()+"' -o bin/berth-router ./cmd/router"), "%s\nwant the flags %s", cmd, want.LDFlags())
}

// The Dockerfile builds the same file system: make's binary at /berth, this program's CA
// bundle, the same user and labels.
func TestDockerfileMatches(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	df := string(raw)
	for _, want := range []string{
		"make bin/berth-${BINARY}",
		"go run ./hack/imagebuild -ca-certificates ",
		"COPY --from=build /out/berth /berth",
		"COPY --from=build /out/ca-certificates.crt " + CAFile,
		"USER " + User,
		`ENTRYPOINT ["` + Entrypoint + `"]`,
	} {
		assert.Contains(t, df, want)
	}
	for label := range Labels(Binaries[0], Stamp{}) {
		assert.Regexp(t, regexp.MustCompile(`(?m)(^|\s)`+regexp.QuoteMeta(label)+`=`), df, "label %s", label)
	}
}

// Every image this program builds is one the shipped manifests name, with the VERSION tag
// (manifests/ tests that they name nothing else).
func TestManifestsNameTheImages(t *testing.T) {
	version, err := os.ReadFile(filepath.Join(root, "VERSION"))
	require.NoError(t, err)
	for _, b := range Binaries {
		raw, err := os.ReadFile(filepath.Join(root, "manifests", strings.TrimPrefix(b.Name, "berth-"), "deployment.yaml"))
		require.NoError(t, err)
		assert.Contains(t, string(raw), "image: "+DefaultRegistry+"/"+b.Name+":"+strings.TrimSpace(string(version))+"\n")
	}
}

func TestCACertificates(t *testing.T) {
	ca := CACertificates()
	assert.True(t, x509.NewCertPool().AppendCertsFromPEM(ca))
	assert.Equal(t, ca, CACertificates(), "the same every time")
}
