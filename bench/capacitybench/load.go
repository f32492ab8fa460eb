package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// requestTimeout bounds one request: a request the squeeze keeps waiting longer than this
// counts as failed (and far over any SLO).
const requestTimeout = 3 * time.Minute

// arrivals are the load's request times from the start: Poisson at c.low for c.lowFor,
// c.high for c.highFor, c.low for c.lowFor again. The same seed gives both modes the same
// arrivals.
func arrivals(c config, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 0xcafe))
	var out []time.Duration
	var at time.Duration
	phase := func(rate float64, length time.Duration) {
		end := at + length
		for {
			at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			if at >= end {
				at = end
				return
			}
			out = append(out, at)
		}
	}
	phase(c.low, c.lowFor)
	phase(c.high, c.highFor)
	phase(c.low, c.lowFor)
	return out
}

// request is one request's outcome.
type request struct {
	at   time.Duration // when it was sent, from the start
	ttft time.Duration // to the first content token; 0 when it failed
	err  error
}

// runLoad sends a streaming chat completion through the router at each arrival (open loop:
// a slow answer does not hold the next request back) and waits for every answer.
func runLoad(ctx context.Context, c config, routerAddr string, at []time.Duration, start time.Time) []request {
	// One connection per request in flight, as many clients would open.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	oc := openai.NewClient(option.WithBaseURL("http://"+routerAddr+"/v1"), option.WithAPIKey("bench"),
		option.WithMaxRetries(0), option.WithHTTPClient(hc), option.WithRequestTimeout(requestTimeout))
	out := make([]request, len(at))
	var wg sync.WaitGroup
	for i, a := range at {
		select {
		case <-ctx.Done():
			wg.Wait()
			return out[:i]
		case <-time.After(time.Until(start.Add(a))):
		}
		out[i].at = time.Since(start)
		wg.Go(func() {
			out[i].ttft, out[i].err = ask(ctx, oc, c.maxTokens, fmt.Sprintf("question %d", i))
		})
	}
	wg.Wait()
	return out
}

// ask streams one answer and returns the time to its first content token.
func ask(ctx context.Context, oc openai.Client, maxTokens int64, prompt string) (time.Duration, error) {
	begin := time.Now()
	stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(maxTokens)})
	defer stream.Close()
	var first time.Duration
	for stream.Next() {
		if ch := stream.Current(); first == 0 && len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			first = time.Since(begin)
		}
	}
	if err := stream.Err(); err != nil {
		return 0, err
	}
	if first == 0 {
		return 0, fmt.Errorf("the answer had no content")
	}
	return first, nil
}
