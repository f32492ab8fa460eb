package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Each mode runs in a process of its own (this binary, re-executed with modeEnv naming the
// mode and its config), which starts the mode's control plane and components and writes
// its result as JSON to the file resultEnv names. Run in one process one after the other,
// the mode that ran second was 10–20% slower to Available in both orders (2026-11-28): the
// first mode's stopped apiserver and etcd left goroutines and heap in the process that then
// served the second. A process per mode starts each from nothing.
const (
	modeEnv   = "SCALEBENCH_MODE"
	resultEnv = "SCALEBENCH_RESULT"
)

// modeConfig is what a mode process is told: the mode and the sizes (config's fields,
// which are not exported).
type modeConfig struct {
	Mode           string
	Servings, Pods int
	Nodes          int
	Churn          time.Duration
}

// Wire forms of the result, for the file a mode process writes.
type (
	resultWire struct {
		Mode       string
		Available  time.Duration
		Settle     time.Duration
		ChurnOps   int
		Progress   []sampleWire
		Components []componentWire
	}
	sampleWire struct {
		Phase                             string
		At                                time.Duration
		Available, Pods, Bound, PodsReady int
	}
	componentWire struct {
		Role    string
		PeakRSS uint64
		Marks   map[string]statsWire
	}
	statsWire struct {
		Goroutines int
		Heap       uint64
		CPU        float64
		Requests   map[string]int
	}
)

// runIfChild runs this process as a component (component.go) or a mode process and
// reports true, or reports false in the benchmark's own process.
func runIfChild() bool {
	if runIfComponent() {
		return true
	}
	raw := os.Getenv(modeEnv)
	if raw == "" {
		return false
	}
	var mc modeConfig
	if err := json.Unmarshal([]byte(raw), &mc); err != nil {
		must(fmt.Errorf("%s: %w", modeEnv, err))
	}
	quietLogs()
	c := config{servings: mc.Servings, podsPerServing: mc.Pods, nodes: mc.Nodes, churn: mc.Churn, log: os.Stderr}
	r, err := run(mc.Mode, c)
	must(err)
	out, err := json.Marshal(toWire(r))
	must(err)
	must(os.WriteFile(os.Getenv(resultEnv), out, 0o600))
	return true
}

// runMode runs one mode in a process of its own, its progress lines copied to log.
func runMode(mode string, c config) (result, error) {
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	f, err := os.CreateTemp("", "scalebench-result-")
	if err != nil {
		return result{}, err
	}
	f.Close()
	defer os.Remove(f.Name())
	mc, err := json.Marshal(modeConfig{Mode: mode, Servings: c.servings, Pods: c.podsPerServing, Nodes: c.nodes, Churn: c.churn})
	if err != nil {
		return result{}, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), modeEnv+"="+string(mc), resultEnv+"="+f.Name())
	var stderr bytes.Buffer // for the error, should it fail
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if c.log != nil {
		cmd.Stderr = io.MultiWriter(c.log, &stderr)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		tail := stderr.Bytes()
		tail = tail[max(0, len(tail)-2000):]
		return result{}, fmt.Errorf("mode %s: %w; its last output:\n%s", mode, err, tail)
	}
	raw, err := os.ReadFile(f.Name())
	if err != nil {
		return result{}, err
	}
	var w resultWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return result{}, fmt.Errorf("mode %s's result: %w", mode, err)
	}
	return fromWire(w), nil
}

func toWire(r result) resultWire {
	w := resultWire{Mode: r.mode, Available: r.available, Settle: r.settle, ChurnOps: r.churnOps}
	for _, s := range r.progress {
		w.Progress = append(w.Progress, sampleWire{Phase: s.phase, At: s.at, Available: s.available, Pods: s.pods, Bound: s.bound, PodsReady: s.podsReady})
	}
	for _, comp := range r.components {
		cw := componentWire{Role: comp.role, PeakRSS: comp.peakRSS(), Marks: map[string]statsWire{}}
		comp.mu.Lock()
		for name, st := range comp.marks {
			cw.Marks[name] = statsWire{Goroutines: st.goroutines, Heap: st.heap, CPU: st.cpu, Requests: st.requests}
		}
		comp.mu.Unlock()
		w.Components = append(w.Components, cw)
	}
	return w
}

// fromWire is the result a mode process wrote; its components are what they measured
// (no process behind them any more).
func fromWire(w resultWire) result {
	r := result{mode: w.Mode, available: w.Available, settle: w.Settle, churnOps: w.ChurnOps}
	for _, s := range w.Progress {
		r.progress = append(r.progress, sample{phase: s.Phase, at: s.At, available: s.Available, pods: s.Pods, bound: s.Bound, podsReady: s.PodsReady})
	}
	for _, cw := range w.Components {
		comp := &component{role: cw.Role, peak: cw.PeakRSS, marks: map[string]stats{}}
		for name, st := range cw.Marks {
			comp.marks[name] = stats{goroutines: st.Goroutines, heap: st.Heap, cpu: st.CPU, requests: st.Requests}
		}
		r.components = append(r.components, comp)
	}
	return r
}
