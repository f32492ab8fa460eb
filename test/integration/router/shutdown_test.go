package router

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/berth-sh/berth/pkg/router"
)

// TestGracefulShutdown stops one berth-router replica (as SIGTERM does) while a stream runs
// through it: its readiness goes false before its shutdown delay ends, it still serves new
// requests during the delay, the stream it carries outlasts the delay and finishes whole,
// the other replica serves throughout, and once it returns it takes no connection. Each
// "during the delay" is judged by the router's Draining signal (the delay's end), not by a
// clock, so a slow machine cannot fail it; the delay is only long enough to fit the checks.
func TestGracefulShutdown(t *testing.T) {
	w := newWorld(t, 1)
	// A real-time engine: 8 ms per token, so 1000 tokens (8 s) outlast the delay below.
	w.servedPods("drain", 1, "", map[string]string{timeScaleLabel: "1"})

	const delay = 4 * time.Second
	r, err := router.New(cp.RESTConfig(), router.Options{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", ScrapeInterval: 100 * time.Millisecond,
		MaxBodyBytes: 1 << 20, ShutdownDelay: delay, ShutdownTimeout: 20 * time.Second}, klog.Background().WithName("router-drain"))
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("router not ready")
	}
	c := openai.NewClient(option.WithBaseURL("http://"+r.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	w.eventually("the new replica routes to the engine", 30*time.Second, func() bool {
		_, _, err := chat(w.ctx, c, "drain", "hello")
		return err == nil
	})
	readyz := func() int {
		res, err := http.Get("http://" + r.AdminAddr() + "/readyz")
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, readyz())

	stream := c.Chat.Completions.NewStreaming(w.ctx, openai.ChatCompletionNewParams{
		Model: "drain", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long answer")}, MaxTokens: openai.Int(1000)})
	require.True(t, stream.Next(), "the stream started: %v", stream.Err())
	var text strings.Builder
	finish := ""
	collect := func(chunk openai.ChatCompletionChunk) {
		for _, ch := range chunk.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	collect(stream.Current())

	inDelay := func() bool {
		select {
		case <-r.Draining():
			return false
		default:
			return true
		}
	}
	stop() // what SIGTERM does in cmd/router
	w.eventually("readiness is false", 30*time.Second, func() bool { return readyz() == http.StatusServiceUnavailable })
	require.True(t, inDelay(), "readiness went false before the shutdown delay ended")
	_, _, err = chat(w.ctx, c, "drain", "still there?")
	require.NoError(t, err, "during the shutdown delay the replica still serves")
	require.True(t, inDelay(), "the request above was served within the delay, not by luck after it")
	_, _, err = chat(w.ctx, client_(0), "drain", "the other replica")
	require.NoError(t, err, "the other replica serves throughout")

	// Chunks read after the delay ended prove the stream was drained, not finished before.
	afterDelay := 0
	for stream.Next() {
		collect(stream.Current())
		if !inDelay() {
			afterDelay++
		}
	}
	require.NoError(t, stream.Err(), "the in-flight stream finished without error")
	assert.Equal(t, "length", finish, "the stream ran to its 1000 tokens")
	assert.Positive(t, afterDelay, "the stream outlasted the delay: it was drained, not finished before the stop")
	assert.NotEmpty(t, text.String())

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the router did not return after draining")
	}
	_, err = net.DialTimeout("tcp", r.Addr(), time.Second)
	assert.Error(t, err, "a stopped replica takes no connection")
}
