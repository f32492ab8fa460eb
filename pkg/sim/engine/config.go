package engine

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Flavor selects which inference server the simulator impersonates. It only changes the
// names of the exported metrics (and a few cosmetic details such as owned_by in /v1/models);
// the OpenAI API and the latency model are the same for both.
type Flavor string

const (
	VLLM   Flavor = "vLLM"
	SGLang Flavor = "SGLang"
)

// Role is the part an engine plays in prefill/decode (PD) disaggregation.
type Role string

const (
	// RoleBoth is a regular engine that prefills and decodes its own requests.
	RoleBoth Role = ""
	// RolePrefill only prefills: it generates at most one token per request and
	// publishes the prompt's KV to the hub for a decode engine to pick up.
	RolePrefill Role = "prefill"
	// RoleDecode looks for the prompt's KV in the hub before prefilling locally.
	RoleDecode Role = "decode"
)

// Config describes one simulated engine. Zero fields take the defaults documented on
// each field; New applies them.
type Config struct {
	Model  string // base model id, listed by /v1/models
	Flavor Flavor
	Role   Role
	// ID names the engine (e.g. "ns/pod"). It is sent in every response as header
	// "X-Sim-Engine: <ID>" and used as the NIXL engine id. Empty → a random id.
	ID string
	// TimeScale converts simulated durations to real ones: real = simulated × TimeScale.
	// 0 means 1. Tests use ~0.001–0.05.
	TimeScale float64

	MaxBatch          int // max running sequences (default 64)
	KVCacheTokens     int // KV capacity in tokens (default 131072)
	BlockSize         int // tokens per KV block and per prefix-cache block (default 16)
	PrefixCacheBlocks int // LRU capacity of the prefix cache in blocks (default KVCacheTokens/BlockSize)

	PrefillPerToken    time.Duration // simulated prefill time per prompt token not found in the prefix cache (default 100µs)
	DecodeBase         time.Duration // simulated time of one decode step (default 8ms)
	DecodePerSeq       time.Duration // added per sequence in a decode step (default 150µs)
	KVTransferPerToken time.Duration // simulated time to receive remote KV per prompt token (default 2µs)
	// Location is where the engine sits in the fabric, nearest first: its node, then its
	// domain at each tier up (NVLink domain, leaf, spine). A prefill engine's KV carries its
	// Location; a decode engine receiving it pays KVTransferByTier[i] more, once, where i is
	// the first level the two share (0: the same node), or the last entry when they share
	// none. Empty, or no KVTransferByTier: no cost by distance.
	Location []string
	// KVTransferByTier is the simulated time one KV handoff takes on top of
	// KVTransferPerToken, by the level of Location the prefill and decode engines share:
	// [0] the same node, [1] the next level (an NVLink domain), …, the last for farther
	// (beyond the spine). Set alike on every engine of a setup.
	KVTransferByTier []time.Duration

	DefaultMaxTokens int // used when the request sets no max_tokens (default 16)
	MaxModelLen      int // prompt+max_tokens limit (default 32768); over it → 400 as vLLM does
	// MaxLoRAs is only reported (label max_lora of vllm:lora_requests_info); adapters
	// beyond it are still accepted, like vLLM's CPU LoRA cache. Default 4.
	MaxLoRAs int

	// LegacyMetricNames exports the older vLLM metric names (gpu_cache_usage_perc,
	// gpu_prefix_cache_*, time_per_output_token_seconds) instead of the current ones.
	LegacyMetricNames bool

	// Hub is the KV-transfer hub shared by the engines of a PD setup; nil → a private one.
	Hub *KVHub
	// Version is the engine's build, as far as its KV cache layout goes (tests set it from a
	// pod label). KV handed between engines of different non-empty versions is counted
	// (Stats.KVCrossVersion, KVHub.Transfers): a real pair of mismatched builds would
	// misread or refuse it.
	Version string

	// BootstrapTimeout bounds, in real time, how long a decode engine waits for the
	// prefill side of a mooncake (bootstrap_room) request before prefilling locally.
	// 0 → 30 s × TimeScale, clamped to [2 s, 30 s].
	BootstrapTimeout time.Duration
}

// withDefaults returns cfg with every zero field replaced by its default.
func (cfg Config) withDefaults() Config {
	if cfg.Model == "" {
		cfg.Model = "sim-model"
	}
	if cfg.Flavor == "" {
		cfg.Flavor = VLLM
	}
	if cfg.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.ID = "sim-" + hex.EncodeToString(b[:])
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 64
	}
	if cfg.KVCacheTokens <= 0 {
		cfg.KVCacheTokens = 131072
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.PrefixCacheBlocks <= 0 {
		cfg.PrefixCacheBlocks = cfg.KVCacheTokens / cfg.BlockSize
	}
	if cfg.PrefillPerToken <= 0 {
		cfg.PrefillPerToken = 100 * time.Microsecond
	}
	if cfg.DecodeBase <= 0 {
		cfg.DecodeBase = 8 * time.Millisecond
	}
	if cfg.DecodePerSeq <= 0 {
		cfg.DecodePerSeq = 150 * time.Microsecond
	}
	if cfg.KVTransferPerToken <= 0 {
		cfg.KVTransferPerToken = 2 * time.Microsecond
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.MaxModelLen <= 0 {
		cfg.MaxModelLen = 32768
	}
	if cfg.MaxLoRAs <= 0 {
		cfg.MaxLoRAs = 4
	}
	if cfg.BootstrapTimeout <= 0 {
		t := time.Duration(float64(30*time.Second) * cfg.TimeScale)
		cfg.BootstrapTimeout = min(max(t, 2*time.Second), 30*time.Second)
	}
	return cfg
}

// real converts a simulated duration to the real time it takes.
func (cfg *Config) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) * cfg.TimeScale)
}

// sim converts a real duration back to simulated time.
func (cfg *Config) sim(d time.Duration) time.Duration {
	return time.Duration(float64(d) / cfg.TimeScale)
}

// handoffCost is the extra time a KV handoff from an engine at from takes to reach this one
// (Location, KVTransferByTier): by the first level both share, else the farthest entry.
func (cfg Config) handoffCost(from []string) time.Duration {
	costs := cfg.KVTransferByTier
	if len(costs) == 0 || len(cfg.Location) == 0 || len(from) == 0 {
		return 0
	}
	level := len(costs) - 1
	for i, here := range cfg.Location {
		if i < len(from) && here != "" && from[i] == here {
			level = min(i, len(costs)-1)
			break
		}
	}
	return costs[level]
}
