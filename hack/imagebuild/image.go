package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// DefaultRegistry is where the shipped manifests pull the images from.
	DefaultRegistry = "ghcr.io/berth-sh"
	// Entrypoint is the binary's path in every image (the Dockerfile's too).
	Entrypoint = "/berth"
	// User is the non-root UID:GID the images run as (distroless's "nonroot"). Numeric, so
	// the kubelet can check runAsNonRoot without an /etc/passwd.
	User = "65532:65532"
	// CAFile is where the CA bundle goes.
	CAFile = "/etc/ssl/certs/ca-certificates.crt"
	// Source is the repository, for the images' labels.
	Source = "https://github.com/berth-sh/berth"
)

// Binary is one image: the binary's name (the image's too) and its main package.
type Binary struct {
	Name, Package string
}

// Binaries are the images Berth ships; manifests/ names each one.
var Binaries = []Binary{
	{"berth-scheduler", "./cmd/scheduler"},
	{"berth-controller", "./cmd/controller"},
	{"berth-router", "./cmd/router"},
}

// Options say what to build and where.
type Options struct {
	Root, Out, Registry, Arch string
	Stamp                     Stamp
	// Binaries defaults to all of them.
	Binaries []Binary
	// BinDir, when set, holds binaries built already (BuildBinaries); Build then only
	// assembles the images.
	BinDir string
}

// Built is one image written.
type Built struct {
	Ref     name.Tag
	Digest  v1.Hash // of the image manifest (the OCI layout's)
	Archive string  // docker-archive
	Layout  string  // OCI image layout
	// CompressedSize is what a registry stores and a node pulls (the layer, gzipped);
	// UnpackedSize what the file system holds.
	CompressedSize, UnpackedSize int64
}

// Build resolves the stamp, builds the binaries (unless o.BinDir has them) and writes
// every image.
func Build(ctx context.Context, o Options) ([]Built, error) {
	var err error
	if o.Stamp, err = ResolveStamp(ctx, o.Root, o.Stamp); err != nil {
		return nil, err
	}
	if o.Binaries == nil {
		o.Binaries = Binaries
	}
	if o.Registry == "" {
		o.Registry = DefaultRegistry
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	if o.BinDir == "" {
		o.BinDir, err = os.MkdirTemp(o.Out, ".bin-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(o.BinDir)
		if err := BuildBinaries(ctx, o.Root, o.BinDir, o.Arch, o.Stamp, o.Binaries); err != nil {
			return nil, err
		}
	}
	ca := CACertificates()
	var built []Built
	for _, b := range o.Binaries {
		bin, err := os.ReadFile(filepath.Join(o.BinDir, b.Name))
		if err != nil {
			return nil, err
		}
		img, err := NewImage(b, bin, ca, o.Stamp, o.Arch)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.Name, err)
		}
		ref, err := name.NewTag(o.Registry + "/" + b.Name + ":" + o.Stamp.Version)
		if err != nil {
			return nil, err
		}
		w, err := Write(img, ref, o.Out)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.Name, err)
		}
		w.UnpackedSize = int64(len(bin) + len(ca))
		built = append(built, w)
	}
	return built, nil
}

// NewImage is b's image: one layer holding bin at Entrypoint and ca at CAFile, owned by
// root and not writable by the user the image runs as, every timestamp at s.Time().
func NewImage(b Binary, bin, ca []byte, s Stamp, arch string) (v1.Image, error) {
	created := v1.Time{Time: s.Time()}
	fs, err := layerTar(s.Time(), map[string]file{
		Entrypoint[1:]: {mode: 0o755, data: bin},
		CAFile[1:]:     {mode: 0o644, data: ca},
	})
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(fs)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: created, CreatedBy: "hack/imagebuild " + b.Name, Comment: b.Name + " " + s.Version + " at " + Entrypoint + ", CA certificates at " + CAFile}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	cf.Created = created
	labels := Labels(b, s)
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{Entrypoint},
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=" + CAFile},
		Labels:     labels,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	// The same pairs as manifest annotations, where registries look for them.
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// Labels are the OCI labels of b's image (the Dockerfile sets the same). The time is the
// config's created field.
func Labels(b Binary, s Stamp) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    b.Name,
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Commit,
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

type file struct {
	mode int64
	data []byte
}

// layerTar is a tar of files and their parent directories, in a fixed order, owned by
// 0:0, every time at t: nothing of the machine or the moment it was made on.
func layerTar(t time.Time, files map[string]file) ([]byte, error) {
	entries := map[string]*tar.Header{}
	for p, f := range files {
		entries[p] = &tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: f.mode, Size: int64(len(f.data))}
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			entries[d+"/"] = &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := entries[n]
		h.ModTime = t
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(files[n].data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes img as out/<name>.tar (a docker-archive tagged ref) and out/<name>/ (an OCI
// image layout holding img alone, its ref.name annotation the tag), replacing what a
// previous build left there.
func Write(img v1.Image, ref name.Tag, out string) (Built, error) {
	base := filepath.Join(out, filepath.Base(ref.RepositoryStr()))
	w := Built{Ref: ref, Archive: base + ".tar", Layout: base}
	var err error
	if w.Digest, err = img.Digest(); err != nil {
		return w, err
	}
	layers, err := img.Layers()
	if err != nil {
		return w, err
	}
	for _, l := range layers {
		size, err := l.Size()
		if err != nil {
			return w, err
		}
		w.CompressedSize += size
	}
	if err := os.RemoveAll(w.Archive); err != nil {
		return w, err
	}
	if err := tarball.WriteToFile(w.Archive, ref, img); err != nil {
		return w, err
	}
	if err := os.RemoveAll(w.Layout); err != nil {
		return w, err
	}
	p, err := layout.Write(w.Layout, empty.Index)
	if err != nil {
		return w, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return w, err
	}
	err = p.AppendImage(img,
		layout.WithPlatform(v1.Platform{OS: cf.OS, Architecture: cf.Architecture}),
		layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": ref.TagStr(),
			"io.containerd.image.name":          ref.Name(),
		}))
	return w, err
}
