// Package chatstream times an OpenAI streaming chat completion the way a client sees it:
// the time to the first server-sent event that carries content. The benchmarks and the
// sandbox's load generator share it.
package chatstream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// FirstToken reads a streamed chat completion body to its "data: [DONE]" and returns the
// time from start to the first chunk with content. A stream that ends before [DONE], or
// carries no content, is an error: a cut stream is a failed request.
func FirstToken(body io.Reader, start time.Time) (time.Duration, error) {
	var ttft time.Duration
	rd := bufio.NewReader(body)
	for {
		line, err := rd.ReadBytes('\n')
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data: ")); ok {
			if string(data) == "[DONE]" {
				if ttft == 0 {
					return 0, errors.New("stream ended without content")
				}
				return ttft, nil
			}
			if ttft == 0 && hasContent(data) {
				ttft = time.Since(start)
			}
		}
		if err != nil {
			return 0, fmt.Errorf("stream cut before [DONE]: %w", err)
		}
	}
}

func hasContent(data []byte) bool {
	var chunk struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	return json.Unmarshal(data, &chunk) == nil && len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != ""
}
