package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Complete sends one non-streaming completion of maxTokens tokens to the engine served at
// base (an http URL) and waits for the answer: the smallest real request, for tests that
// need an engine's counters and histograms to move.
func Complete(ctx context.Context, base, prompt string, maxTokens int) error {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	return err
}
