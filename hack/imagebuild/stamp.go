package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// versionPackage is where the stamp goes (-ldflags -X); the Makefile names the same.
const versionPackage = "github.com/berth-sh/berth/pkg/version"

// Stamp is what a build stamps into the binaries and the images.
type Stamp struct {
	// Version is the release, from the VERSION file.
	Version string
	// Commit is the commit built.
	Commit string
	// Epoch is SOURCE_DATE_EPOCH: the commit's time, every timestamp of the build.
	Epoch int64
}

// Time is Epoch as a time.
func (s Stamp) Time() time.Time { return time.Unix(s.Epoch, 0).UTC() }

// LDFlags are the linker flags of a release binary: stripped, and stamped as the Makefile's
// bin/berth-% target stamps it.
func (s Stamp) LDFlags() string {
	return fmt.Sprintf("-s -w -X %[1]s.Version=%[2]s -X %[1]s.GitCommit=%[3]s -X %[1]s.BuildDate=%[4]s",
		versionPackage, s.Version, s.Commit, s.Time().Format(time.RFC3339))
}

// ResolveStamp fills in what s leaves empty (Epoch < 0 for unset) from the repository at
// root, as the Makefile does: VERSION, git rev-parse HEAD ("unknown" outside a checkout),
// and $SOURCE_DATE_EPOCH or the commit's time (0 outside a checkout).
func ResolveStamp(ctx context.Context, root string, s Stamp) (Stamp, error) {
	if s.Version == "" {
		raw, err := os.ReadFile(filepath.Join(root, "VERSION"))
		if err != nil {
			return s, err
		}
		s.Version = strings.TrimSpace(string(raw))
	}
	if s.Version == "" || strings.ContainsAny(s.Version, " \t\n'\"") {
		return s, fmt.Errorf("bad version %q", s.Version)
	}
	if s.Commit == "" {
		s.Commit = "unknown"
		if out, err := git(ctx, root, "rev-parse", "HEAD"); err == nil {
			s.Commit = out
		}
	}
	if s.Epoch < 0 {
		s.Epoch = 0
		if env := os.Getenv("SOURCE_DATE_EPOCH"); env != "" {
			e, err := strconv.ParseInt(env, 10, 64)
			if err != nil {
				return s, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
			}
			s.Epoch = e
		} else if out, err := git(ctx, root, "log", "-1", "--format=%ct"); err == nil {
			if e, err := strconv.ParseInt(out, 10, 64); err == nil {
				s.Epoch = e
			}
		}
	}
	return s, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// BuildBinaries builds every binary of bins for linux/arch into dir (dir/berth-router, ...)
// with one go build: static (CGO_ENABLED=0), without local paths (-trimpath), stripped and
// stamped: the same bytes make binaries builds.
func BuildBinaries(ctx context.Context, root, dir, arch string, s Stamp, bins []Binary) error {
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-trimpath", "-ldflags", s.LDFlags(), "-o", tmp + string(filepath.Separator)}
	for _, b := range bins {
		args = append(args, b.Package)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	// go build -o dir/ names each binary after its package's directory.
	for _, b := range bins {
		if err := os.Rename(filepath.Join(tmp, filepath.Base(b.Package)), filepath.Join(dir, b.Name)); err != nil {
			return err
		}
	}
	return nil
}
