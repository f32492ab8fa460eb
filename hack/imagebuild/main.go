// Command imagebuild builds Berth's container images without a Docker engine: one image
// per binary (berth-scheduler, berth-controller, berth-router), each holding only its static
// binary at /berth and a CA bundle, run as UID/GID 65532, with the release in its labels
// and every timestamp at the commit's time, so two builds of one commit give the same
// digests. For each image it writes, under -out:
//
//	berth-router.tar   a docker-archive: docker load -i, kind load image-archive
//	berth-router/      an OCI image layout: crane push bin/images/berth-router ghcr.io/...:v0.1.0
//
// make images runs it with the Makefile's VERSION, commit and SOURCE_DATE_EPOCH. The
// Dockerfile builds the same file system for people with Docker (its binary comes from
// make, its CA bundle from -ca-certificates).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
)

func main() {
	var o Options
	flag.StringVar(&o.Root, "root", ".", "the repository's root")
	flag.StringVar(&o.Out, "out", "bin/images", "directory the docker-archives and OCI layouts are written to")
	flag.StringVar(&o.Stamp.Version, "version", "", "release to stamp and tag (default: the VERSION file)")
	flag.StringVar(&o.Stamp.Commit, "commit", "", "commit to stamp and label (default: git rev-parse HEAD)")
	flag.Int64Var(&o.Stamp.Epoch, "source-date-epoch", -1, "seconds since 1970 for every timestamp (default: $SOURCE_DATE_EPOCH, else the commit's time, else 0)")
	flag.StringVar(&o.Registry, "registry", DefaultRegistry, "repository prefix of the image names")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "GOARCH of the binaries and the images (GOOS is linux)")
	ca := flag.String("ca-certificates", "", "only write the images' CA bundle (PEM) to this file, and exit")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "imagebuild: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *ca != "" {
		if err := os.WriteFile(*ca, CACertificates(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "imagebuild:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	built, err := Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
	for _, b := range built {
		fmt.Printf("%-45s %s  %5.1f MB compressed, %5.1f MB unpacked\n  %s\n  %s\n",
			b.Ref, b.Digest, float64(b.CompressedSize)/1e6, float64(b.UnpackedSize)/1e6, b.Archive, b.Layout)
	}
}
