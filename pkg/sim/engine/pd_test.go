package engine

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// pdPair starts a prefill and a decode engine sharing a hub.
func pdPair(t *testing.T) (prefill, decodeEng *Server, pURL, dURL string, hub *KVHub) {
	t.Helper()
	hub = NewKVHub()
	prefill, pURL = startEngine(t, Config{Model: "m", ID: "ns/prefill-0", Role: RolePrefill, TimeScale: 0.001, Hub: hub})
	decodeEng, dURL = startEngine(t, Config{Model: "m", ID: "ns/decode-0", Role: RoleDecode, TimeScale: 0.001, Hub: hub})
	return
}

var pdPrompt = strings.Repeat("Summarise the quarterly report for the board. ", 40) // ~470 tokens

func expectTransfer(t *testing.T, d *Server) {
	t.Helper()
	if st := d.Stats(); st.KVTransfersReceived != 1 || st.KVTransferMisses != 0 {
		t.Errorf("decode stats: received %d, misses %d; want 1 and 0", st.KVTransfersReceived, st.KVTransferMisses)
	}
}

func completionTokens(t *testing.T, b []byte) float64 {
	t.Helper()
	return decode(t, b)["usage"].(map[string]any)["completion_tokens"].(float64)
}

func TestPDHTTPConnector(t *testing.T) {
	p, d, pURL, dURL, hub := pdPair(t)
	hdr := map[string]string{"X-Request-Id": "req-42"}
	resp, b := post(t, pURL+"/v1/chat/completions", chatBody("m", pdPrompt, 1), hdr)
	if resp.StatusCode != 200 || completionTokens(t, b) != 1 {
		t.Fatalf("prefill: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, dURL+"/v1/chat/completions", chatBody("m", pdPrompt, 20), hdr)
	if resp.StatusCode != 200 || completionTokens(t, b) != 20 {
		t.Fatalf("decode: %d %s", resp.StatusCode, b)
	}
	expectTransfer(t, d)
	// The decode side skipped the ~47ms prefill: it paid ~1ms of transfer and a step.
	pTTFT, _ := histogram(t, scrape(t, pURL), "vllm:time_to_first_token_seconds")
	dTTFT, _ := histogram(t, scrape(t, dURL), "vllm:time_to_first_token_seconds")
	if pTTFT < 0.04 || dTTFT > 0.015 {
		t.Errorf("TTFT prefill %.4fs, decode %.4fs", pTTFT, dTTFT)
	}
	if hub.Len() != 0 {
		t.Errorf("hub holds %d entries after the pull", hub.Len())
	}
	// The prefill engine generates one token even when asked for more.
	_, b = post(t, pURL+"/v1/chat/completions", chatBody("m", "other", 50), nil)
	if completionTokens(t, b) != 1 {
		t.Errorf("prefill role generated %v tokens", completionTokens(t, b))
	}
	if st := p.Stats(); st.KVTransfersReceived != 0 || st.KVTransferMisses != 0 {
		t.Errorf("prefill counted transfers: %+v", st)
	}
}

func TestPDNixl(t *testing.T) {
	_, d, pURL, dURL, hub := pdPair(t)
	body := chatBody("m", pdPrompt, 1)
	body["stream"] = false
	body["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	resp, b := post(t, pURL+"/v1/chat/completions", body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("prefill: %d %s", resp.StatusCode, b)
	}
	m := decode(t, b)
	params, ok := m["kv_transfer_params"].(map[string]any)
	if !ok {
		t.Fatalf("no kv_transfer_params in %s", b)
	}
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(pURL, "http://"))
	blocks := params["remote_block_ids"].([]any)
	tokens := CountTokens("user: " + pdPrompt + "\n")
	if params["do_remote_prefill"] != true || params["do_remote_decode"] != false ||
		params["remote_engine_id"] != "ns/prefill-0" || params["remote_request_id"] != m["id"] ||
		params["remote_host"] != host || strconv.Itoa(int(params["remote_port"].(float64))) != port ||
		len(blocks) != (tokens+15)/16 {
		t.Errorf("kv_transfer_params = %v", params)
	}

	dbody := chatBody("m", pdPrompt, 10)
	dbody["kv_transfer_params"] = params
	resp, b = post(t, dURL+"/v1/chat/completions", dbody, nil)
	if resp.StatusCode != 200 || completionTokens(t, b) != 10 {
		t.Fatalf("decode: %d %s", resp.StatusCode, b)
	}
	if decode(t, b)["kv_transfer_params"] != nil {
		t.Errorf("decode response carries kv_transfer_params: %s", b)
	}
	expectTransfer(t, d)
	// A pull consumes the KV: replaying the decode request is a miss.
	post(t, dURL+"/v1/chat/completions", dbody, nil)
	if st := d.Stats(); st.KVTransferMisses != 1 || hub.Len() != 0 {
		t.Errorf("replay: misses %d, hub %d", st.KVTransferMisses, hub.Len())
	}
}

func TestPDLMCache(t *testing.T) {
	_, d, pURL, dURL, _ := pdPair(t)
	body := map[string]any{"model": "m", "prompt": pdPrompt, "max_tokens": 1}
	if resp, b := post(t, pURL+"/v1/completions", body, nil); resp.StatusCode != 200 {
		t.Fatalf("prefill: %d %s", resp.StatusCode, b)
	}
	body["max_tokens"] = 8
	if resp, b := post(t, dURL+"/v1/completions", body, nil); resp.StatusCode != 200 {
		t.Fatalf("decode: %d %s", resp.StatusCode, b)
	}
	expectTransfer(t, d)
	// A longer prompt sharing the prefix still loads the shared blocks.
	body["prompt"] = pdPrompt + "And the annex."
	post(t, dURL+"/v1/completions", body, nil)
	if st := d.Stats(); st.KVTransfersReceived != 2 {
		t.Errorf("shared-prefix prompt: received %d", st.KVTransfersReceived)
	}
}

func TestPDMooncake(t *testing.T) {
	_, d, pURL, dURL, _ := pdPair(t)
	body := chatBody("m", pdPrompt, 12)
	body["bootstrap_host"] = "127.0.0.1"
	body["bootstrap_port"] = 8998
	body["bootstrap_room"] = int64(7385012345678901)
	var wg sync.WaitGroup
	var dStatus int
	var dBody []byte
	wg.Go(func() {
		resp, b := post(t, dURL+"/v1/chat/completions", body, nil)
		dStatus, dBody = resp.StatusCode, b
	})
	// Send the prefill half once the decode half waits for its room, the hard case.
	eventually(t, 2*time.Second, "decode to wait for the room", func() bool { return d.Stats().Waiting == 1 })
	if resp, b := post(t, pURL+"/v1/chat/completions", body, nil); resp.StatusCode != 200 || completionTokens(t, b) != 1 {
		t.Fatalf("prefill: %d %s", resp.StatusCode, b)
	}
	wg.Wait()
	if dStatus != 200 || completionTokens(t, dBody) != 12 {
		t.Fatalf("decode: %d %s", dStatus, dBody)
	}
	expectTransfer(t, d)
}

func TestPDMiss(t *testing.T) {
	_, d, _, dURL, _ := pdPair(t)
	if resp, b := post(t, dURL+"/v1/chat/completions", chatBody("m", pdPrompt, 3), map[string]string{"X-Request-Id": "never-prefilled"}); resp.StatusCode != 200 {
		t.Fatalf("decode: %d %s", resp.StatusCode, b)
	}
	if st := d.Stats(); st.KVTransferMisses != 1 || st.KVTransfersReceived != 0 {
		t.Errorf("stats %+v, want one miss", st)
	}
}

func TestPDMooncakeTimeout(t *testing.T) {
	hub := NewKVHub()
	d, dURL := startEngine(t, Config{Model: "m", Role: RoleDecode, TimeScale: 0.001, Hub: hub, BootstrapTimeout: 20 * time.Millisecond})
	body := chatBody("m", pdPrompt, 2)
	body["bootstrap_room"] = 1
	if resp, b := post(t, dURL+"/v1/chat/completions", body, nil); resp.StatusCode != 200 {
		t.Fatalf("decode: %d %s", resp.StatusCode, b)
	}
	if st := d.Stats(); st.KVTransferMisses != 1 {
		t.Errorf("stats %+v, want one miss", st)
	}
}

// A KV handoff costs by how far apart the prefill and decode engines sit (Location,
// KVTransferByTier): a decode in the prefill's NVLink domain starts sooner than one across
// the spine, and the cost shows in the decode's time to first token.
func TestPDHandoffCostByTier(t *testing.T) {
	hub := NewKVHub()
	costs := []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond}
	_, pURL := startEngine(t, Config{Model: "m", ID: "ns/prefill", Role: RolePrefill, Hub: hub,
		Location: []string{"n1", "c1", "l1"}, KVTransferByTier: costs})
	ttft := map[string]float64{}
	for name, loc := range map[string][]string{"nvlink": {"n2", "c1", "l1"}, "far": {"n9", "c9", "l9"}} {
		d, dURL := startEngine(t, Config{Model: "m", ID: "ns/decode-" + name, Role: RoleDecode, Hub: hub,
			Location: loc, KVTransferByTier: costs})
		hdr := map[string]string{"X-Request-Id": "req-" + name}
		if resp, b := post(t, pURL+"/v1/chat/completions", chatBody("m", pdPrompt, 1), hdr); resp.StatusCode != 200 {
			t.Fatalf("prefill: %d %s", resp.StatusCode, b)
		}
		if resp, b := post(t, dURL+"/v1/chat/completions", chatBody("m", pdPrompt, 4), hdr); resp.StatusCode != 200 {
			t.Fatalf("decode: %d %s", resp.StatusCode, b)
		}
		expectTransfer(t, d)
		ttft[name], _ = histogram(t, scrape(t, dURL), "vllm:time_to_first_token_seconds")
	}
	if diff := ttft["far"] - ttft["nvlink"]; diff < 0.045 || diff > 0.06 {
		t.Errorf("TTFT in the NVLink domain %.4fs, across the spine %.4fs: want the far one ~49ms (simulated) later", ttft["nvlink"], ttft["far"])
	}
	c := Config{Location: []string{"n1", "c1", "l1"}, KVTransferByTier: costs}
	for from, want := range map[string]time.Duration{"n1/c1/l1": 0, "n2/c1/l1": time.Millisecond, "n2/c2/l1": 5 * time.Millisecond, "n2/c2/l2": 50 * time.Millisecond} {
		if got := c.handoffCost(strings.Split(from, "/")); got != want {
			t.Errorf("handoff from %s: %s, want %s", from, got, want)
		}
	}
	if got := (Config{}).handoffCost([]string{"n1"}); got != 0 {
		t.Errorf("no costs configured: %s", got)
	}
}

// KV handed from a prefill engine of one build to a decode engine of another is counted,
// on the decode engine and on the hub (which outlives both); engines without a Version are
// not counted at all.
func TestPDCrossVersionCounted(t *testing.T) {
	hub := NewKVHub()
	_, p1 := startEngine(t, Config{Model: "m", ID: "ns/p1", Role: RolePrefill, TimeScale: 0.001, Hub: hub, Version: "v1"})
	d1, d1URL := startEngine(t, Config{Model: "m", ID: "ns/d1", Role: RoleDecode, TimeScale: 0.001, Hub: hub, Version: "v1"})
	d2, d2URL := startEngine(t, Config{Model: "m", ID: "ns/d2", Role: RoleDecode, TimeScale: 0.001, Hub: hub, Version: "v2"})
	dn, dnURL := startEngine(t, Config{Model: "m", ID: "ns/dn", Role: RoleDecode, TimeScale: 0.001, Hub: hub})
	for i, dURL := range []string{d1URL, d2URL, dnURL} {
		hdr := map[string]string{"X-Request-Id": "req-" + strconv.Itoa(i)}
		if resp, b := post(t, p1+"/v1/chat/completions", chatBody("m", pdPrompt, 1), hdr); resp.StatusCode != 200 {
			t.Fatalf("prefill: %d %s", resp.StatusCode, b)
		}
		if resp, b := post(t, dURL+"/v1/chat/completions", chatBody("m", pdPrompt, 4), hdr); resp.StatusCode != 200 {
			t.Fatalf("decode: %d %s", resp.StatusCode, b)
		}
	}
	for _, c := range []struct {
		d     *Server
		cross int64
	}{{d1, 0}, {d2, 1}, {dn, 0}} {
		expectTransfer(t, c.d)
		if got := c.d.Stats().KVCrossVersion; got != c.cross {
			t.Errorf("%s: KVCrossVersion %d, want %d", c.d.cfg.ID, got, c.cross)
		}
	}
	if same, cross := hub.Transfers(); same != 1 || cross != 1 {
		t.Errorf("hub transfers: same %d, cross %d; want 1 and 1", same, cross)
	}
}
