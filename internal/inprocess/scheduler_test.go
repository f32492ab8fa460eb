package inprocess

import (
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/pkg/plugins/gang"
)

// The in-process configuration is the shipped one with only what running in another process
// needs changed: the kubeconfig, the client rate, leader election, and the gang args asked for.
func TestSchedulerConfig(t *testing.T) {
	raw, err := SchedulerConfig("/tmp/kc", SchedulerOptions{GangArgs: map[string]any{"permitWaitingTimeSeconds": 7}})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ClientConnection struct {
			Kubeconfig string  `json:"kubeconfig"`
			QPS        float32 `json:"qps"`
			Burst      int     `json:"burst"`
		} `json:"clientConnection"`
		LeaderElection struct {
			LeaderElect bool `json:"leaderElect"`
		} `json:"leaderElection"`
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			PluginConfig  []struct {
				Name string         `json:"name"`
				Args map[string]any `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if c := cfg.ClientConnection; c.Kubeconfig != "/tmp/kc" || c.QPS != BenchRate.QPS || c.Burst != BenchRate.Burst {
		t.Errorf("clientConnection %+v, want /tmp/kc at %+v", c, BenchRate)
	}
	if cfg.LeaderElection.LeaderElect {
		t.Error("leader election is on")
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "berth-scheduler" {
		t.Fatalf("profiles %+v, want the shipped berth-scheduler profile", cfg.Profiles)
	}
	found := false
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == gang.Name {
			found = true
			if len(pc.Args) != 1 || pc.Args["permitWaitingTimeSeconds"] != float64(7) {
				t.Errorf("gang args %v, want only permitWaitingTimeSeconds: 7", pc.Args)
			}
		}
	}
	if !found {
		t.Errorf("no %s pluginConfig in %s", gang.Name, raw)
	}

	raw, err = DefaultSchedulerConfig("/tmp/kc", ClusterRate)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Profiles = nil
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if c := cfg.ClientConnection; c.QPS != ClusterRate.QPS || c.Burst != ClusterRate.Burst || len(cfg.Profiles) != 0 {
		t.Errorf("default scheduler config %s, want kube-scheduler's default profile at %+v", raw, ClusterRate)
	}
}

// The shipped rate is the one manifests/scheduler/config.yaml states, and a configuration
// asked to run at it carries it unchanged.
func TestShippedRate(t *testing.T) {
	r, err := ShippedRate()
	if err != nil {
		t.Fatal(err)
	}
	if r.QPS < 50 || r.Burst < int(r.QPS) {
		t.Fatalf("shipped rate %+v: below kube-scheduler's defaults", r)
	}
	raw, err := SchedulerConfig("/tmp/kc", SchedulerOptions{Rate: r})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ClientConnection struct {
			QPS   float32 `json:"qps"`
			Burst int     `json:"burst"`
		} `json:"clientConnection"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if c := cfg.ClientConnection; c.QPS != r.QPS || c.Burst != r.Burst {
		t.Errorf("config at the shipped rate has qps %g burst %d, want %+v", c.QPS, c.Burst, r)
	}
}
