package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// etcdVersion is the version of go.etcd.io/etcd/server/v3 in go.mod. It keys
// the cached binary so that bumping etcd in go.mod (and here; a test checks
// they agree) makes every machine rebuild instead of silently running a stale
// etcd.
const etcdVersion = "v3.7.0"

// etcdMainPackage is the command built into the cached etcd binary.
const etcdMainPackage = modulePath + "/internal/controlplane/etcdmain"

const (
	envEtcdBinary = "BERTH_ETCD_BINARY"
	envCacheDir   = "BERTH_CACHE_DIR"
)

// etcdBinary returns the path of an etcd executable, building and caching it
// on first use. Building from our own module (rather than downloading a
// release or requiring one on PATH) works offline, needs no host setup and
// pins etcd to the version in go.mod.
func etcdBinary(ctx context.Context, logger klog.Logger) (string, error) {
	if p := os.Getenv(envEtcdBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%q: %w", envEtcdBinary, p, err)
		}
		return p, nil
	}

	cacheDir := os.Getenv(envCacheDir)
	if cacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("locating cache dir for the etcd binary (set %s or %s): %w", envCacheDir, envEtcdBinary, err)
		}
		cacheDir = d
	}
	dir := filepath.Join(cacheDir, "berth")
	bin := filepath.Join(dir, "etcd-"+etcdVersion)
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}

	// Several test binaries (one per package under `go test ./...`) may
	// start at once on a cold cache. The lock makes all but one wait for
	// the build instead of compiling etcd N times in parallel.
	unlock, err := lockFile(ctx, bin+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if isExecutable(bin) { // built by someone else while we waited
		return bin, nil
	}

	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("cannot build etcd (set %s to an etcd %s binary instead): %w", envEtcdBinary, etcdVersion, err)
	}
	logger.Info("Building etcd, this happens once per machine and etcd version", "version", etcdVersion, "output", bin)
	start := time.Now()
	// Build into a temp file in the same directory and rename it into place:
	// a reader never sees a half-written binary even if the build is
	// interrupted or an unlocked (older) builder races with us.
	tmp, err := os.CreateTemp(dir, ".etcd-build-*")
	if err != nil {
		return "", err
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName) // no-op once renamed

	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("cannot build etcd (set %s to an etcd %s binary instead): %w", envEtcdBinary, etcdVersion, err)
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", tmpName, etcdMainPackage)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", etcdMainPackage, err, out.Bytes())
	}
	if err := os.Chmod(tmpName, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmpName, bin); err != nil {
		return "", err
	}
	logger.Info("Built etcd", "path", bin, "duration", time.Since(start).Round(time.Millisecond))
	return bin, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// lockFile takes an exclusive flock on path, polling so that ctx can abort
// the wait. The lock dies with the process, so a crashed builder never
// leaves a stale lock behind.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s (another process is building etcd): %w", path, context.Cause(ctx))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
