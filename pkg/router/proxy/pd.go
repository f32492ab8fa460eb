package proxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/request"
)

// PDTarget is one prefill/decode pair of the same PD group.
type PDTarget struct {
	PrefillURL, DecodeURL string
	// PrefillAddress is the prefill engine's ip:port (mooncake's bootstrap host).
	PrefillAddress string
}

// PrefillError says the prefill step failed; the decode endpoint was not used.
type PrefillError struct {
	Status int // 0 for a transport error
	Err    error
}

func (e *PrefillError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("prefill answered %d: %v", e.Status, e.Err)
	}
	return "prefill: " + e.Err.Error()
}

func (e *PrefillError) Unwrap() error { return e.Err }

// SGLangBootstrapPort is SGLang's default --disaggregation-bootstrap-port, where a decode
// instance fetches KV from its prefill peer under mooncake.
const SGLangBootstrapPort = 8998

// Disaggregated runs one request through a prefill and a decode engine the way the KV
// connector needs, and returns the decode engine's response for Relay. body is the request
// as the engine should see it (model already rewritten).
//
//   - http: prefill first with max_tokens 1 and no stream, under an X-Request-Id that the
//     decode request repeats; the engines move the KV out of band by that id (vLLM's
//     P2pNcclConnector and other request-id keyed connectors).
//   - nixl: the prefill request asks for remote decode (kv_transfer_params
//     do_remote_decode); its answer's kv_transfer_params (engine id, block ids, host, port)
//     go verbatim into the decode request, which pulls the blocks (vLLM's NixlConnector).
//   - lmcache: prefill first with max_tokens 1; it stores the KV in the shared LMCache
//     store by content, where the decode engine finds the prompt's prefix by itself.
//   - mooncake: prefill and decode at the same time, both carrying bootstrap_host,
//     bootstrap_port and a random bootstrap_room; decode waits for the prefill's KV in that
//     room (SGLang's PD disaggregation over Mooncake).
func (p *Proxy) Disaggregated(ctx context.Context, conn networkingv1alpha1.KVConnectorType, path string, header http.Header, body []byte, t PDTarget) (*http.Response, error) {
	prefillBody := func(extra map[string]any) ([]byte, error) {
		set := map[string]any{"max_tokens": 1, "stream": false, "stream_options": nil, "max_completion_tokens": nil}
		for k, v := range extra {
			set[k] = v
		}
		return request.Rewrite(body, set)
	}
	runPrefill := func(b []byte, extra map[string]string) ([]byte, error) {
		resp, err := p.sendLeg(ctx, "prefill", t.PrefillURL, path, header, extra, b)
		if err != nil {
			return nil, &PrefillError{Err: err}
		}
		out, err := ReadAll(resp)
		if err != nil {
			return nil, &PrefillError{Err: err}
		}
		if resp.StatusCode/100 != 2 {
			return nil, &PrefillError{Status: resp.StatusCode, Err: fmt.Errorf("%s", truncate(out))}
		}
		return out, nil
	}
	switch conn {
	case networkingv1alpha1.ConnectorTypeNIXL:
		pb, err := prefillBody(map[string]any{"kv_transfer_params": map[string]any{
			"do_remote_decode": true, "do_remote_prefill": false,
			"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil,
		}})
		if err != nil {
			return nil, err
		}
		out, err := runPrefill(pb, nil)
		if err != nil {
			return nil, err
		}
		var answer struct {
			KVTransferParams json.RawMessage `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal(out, &answer); err != nil || len(answer.KVTransferParams) == 0 || string(answer.KVTransferParams) == "null" {
			return nil, &PrefillError{Status: http.StatusBadGateway, Err: fmt.Errorf("prefill answer has no kv_transfer_params (is the engine started with NixlConnector?)")}
		}
		db, err := request.Rewrite(body, map[string]any{"kv_transfer_params": answer.KVTransferParams})
		if err != nil {
			return nil, err
		}
		return p.sendLeg(ctx, "decode", t.DecodeURL, path, header, nil, db)

	case networkingv1alpha1.ConnectorTypeMoonCake:
		host, _, _ := net.SplitHostPort(t.PrefillAddress)
		room := randomRoom()
		boot := map[string]any{"bootstrap_host": host, "bootstrap_port": SGLangBootstrapPort, "bootstrap_room": room}
		pb, err := request.Rewrite(body, boot)
		if err != nil {
			return nil, err
		}
		db := pb
		pctx, cancel := context.WithCancel(ctx)
		prefillDone := make(chan error, 1)
		go func() {
			resp, err := p.sendLeg(pctx, "prefill", t.PrefillURL, path, header, nil, pb)
			if err == nil {
				Discard(resp)
				if resp.StatusCode/100 != 2 {
					err = &PrefillError{Status: resp.StatusCode, Err: fmt.Errorf("bootstrap room %d", room)}
				}
			} else {
				err = &PrefillError{Err: err}
			}
			prefillDone <- err
		}()
		resp, err := p.sendLeg(ctx, "decode", t.DecodeURL, path, header, nil, db)
		if err != nil {
			cancel()
			return nil, err
		}
		// The prefill's own answer is not the client's; let it finish in the background.
		go func() { <-prefillDone; cancel() }()
		return resp, nil

	default: // http and lmcache: prefill, then decode
		id := randomID()
		extra := map[string]string{"X-Request-Id": id}
		pb, err := prefillBody(nil)
		if err != nil {
			return nil, err
		}
		if _, err := runPrefill(pb, extra); err != nil {
			return nil, err
		}
		if conn == networkingv1alpha1.ConnectorTypeLMCache {
			extra = nil // LMCache finds the KV by content, not by id
		}
		return p.sendLeg(ctx, "decode", t.DecodeURL, path, header, extra, body)
	}
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "berth-" + hex.EncodeToString(b[:])
}

func randomRoom() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) >> 1)
}

func truncate(b []byte) string {
	if len(b) > 512 {
		return strconv.Quote(string(b[:512])) + "..."
	}
	return string(b)
}
