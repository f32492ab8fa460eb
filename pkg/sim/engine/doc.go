// Package engine is a simulated LLM inference engine: an in-process HTTP server that
// speaks like vLLM (or, with Flavor SGLang, exports SGLang's metrics) and stands in for
// GPUs in tests and the sandbox. A router can proxy OpenAI requests to it, scrape its
// /metrics and drive prefill/decode (PD) disaggregation flows against it; what it sees
// should be indistinguishable from a real engine except for the numbers.
//
// # API
//
// POST /v1/chat/completions and /v1/completions (streaming or not), GET /v1/models,
// GET /health, POST /v1/load_lora_adapter and /v1/unload_lora_adapter, GET /metrics.
// Errors use vLLM's body {"error":{"message","type","param","code"}}. Every response
// carries "X-Sim-Engine: <Config.ID>".
//
// POST /v1/messages is Anthropic's Messages API, as vLLM serves it since v0.11.1 and as an
// Anthropic-compatible provider would (tests put an engine behind an HTTPS server to play
// one): max_tokens is required, the system prompt becomes the first chat message, the
// answer is {"type":"message","content":[{"type":"text"}],"stop_reason","usage":
// {"input_tokens","output_tokens"}}, a stream is message_start, content_block_start, one
// content_block_delta per token, content_block_stop, message_delta (stop reason, output
// tokens) and message_stop; errors are {"type":"error","error":{"type","message"}}.
//
// Tokens are 4-byte slices of the prompt text (chat messages rendered "role: content\n"),
// see CountTokens; the completion is "tok0 tok1 …", one word per token.
//
// # Latency model
//
// Time is simulated and mapped to real time by Config.TimeScale (real = simulated ×
// TimeScale). Metrics report simulated seconds, so they look like a real GPU's whatever
// the scale. The engine runs vLLM-style continuous batching in steps:
//
//   - Arriving requests join a FIFO waiting queue. At each step boundary the head of the
//     queue is admitted while fewer than MaxBatch sequences run and enough KV blocks are
//     free for ceil((prompt+max_tokens)/BlockSize) blocks; otherwise it, and everything
//     behind it, waits (num_requests_waiting).
//   - Prefix cache: the prompt's full blocks of BlockSize tokens are hashed, each hash
//     chained with the previous one. On admission the leading blocks found in an LRU of
//     PrefixCacheBlocks blocks are hits; only the other prompt tokens are computed, at
//     PrefillPerToken each. After prefill the prompt's blocks enter the LRU.
//   - A step lasts DecodeBase + DecodePerSeq × (sequences in the step) + the prefill time
//     of the sequences prefilled in it (prefill stalls the batch, as without chunked
//     prefill). At its end every sequence in it produces one token; a prefilled one
//     produces its first. A sequence finishes at max_tokens and frees its KV blocks.
//   - Hence TTFT = queueing + the step that prefills it, and ITL = the step time, which
//     grows with the batch and with concurrent prefills.
//   - Real time follows simulated time through a monotonic anchor; steps whose real
//     duration is below ~200µs are run back to back until their sum is worth a sleep,
//     so throughput stays right at TimeScale 0.001. When idle the loop sleeps on a
//     channel.
//
// # PD disaggregation
//
// A prefill-role engine generates at most one token and publishes the prompt's KV to the
// KVHub shared through Config.Hub; a decode-role engine that finds it there pays
// KVTransferPerToken per transferred token (off the batch: the sequence holds its slot
// and KV until the transfer lands) instead of prefilling, and counts
// KVTransfersReceived, or prefills locally and counts KVTransferMisses. Engines that know
// their place in the fabric (Config.Location) charge a handoff Config.KVTransferByTier more
// by the closest level the two engines share (the same node, NVLink domain, leaf, farther). The KV is found,
// depending on what the request carries, by:
//
//   - nixl: kv_transfer_params {do_remote_decode:true} on the prefill request makes the
//     response carry {do_remote_prefill:true, remote_engine_id, remote_request_id,
//     remote_block_ids, remote_host, remote_port}; the decode request carries it back
//     and the decode engine pulls (engine id, request id) from the hub;
//   - mooncake: both halves, sent concurrently, carry bootstrap_host/port/room; the
//     decode engine waits (Config.BootstrapTimeout) for the prefill of that room;
//   - http: the decode request has the same X-Request-Id as the prefill one;
//   - lmcache: otherwise, the longest prefix of the prompt's blocks in the hub's
//     content-addressed store, which prefill engines fill with every prompt.
package engine
