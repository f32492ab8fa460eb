package request

import (
	"bytes"
	"io"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKindOfEveryPath(t *testing.T) {
	for _, p := range Paths() {
		k := KindOf(p)
		require.NotEmpty(t, k, p)
		assert.Equal(t, p, k.Path(), "the engine gets the path the client used")
		assert.Equal(t, k, KindOf(p+"/"))
	}
	assert.Empty(t, KindOf("/v1/images/generations"))
}

func TestParsePassThroughJSON(t *testing.T) {
	for _, tc := range []struct {
		kind   Kind
		body   string
		prompt string
		stream bool
		max    int64
	}{
		{Embeddings, `{"model":"m","input":["alpha","beta"],"encoding_format":"float"}`, "alphabeta", false, 0},
		{Embeddings, `{"model":"m","input":[[1,2,3]]}`, "", false, 0},
		{Responses, `{"model":"m","instructions":"be brief. ","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"stream":true,"max_output_tokens":9}`,
			"be brief. user: hi", true, 9},
		{Rerank, `{"model":"m","query":"q","documents":["d1","d2"],"top_n":1}`, "qd1d2", false, 0},
		{RerankV2, `{"model":"m","query":"q","documents":[{"text":"d"}]}`, "qd", false, 0},
		{Score, `{"model":"m","text_1":"a","text_2":["b","c"]}`, "abc", false, 0},
		{Speech, `{"model":"m","input":"say this","voice":"alloy"}`, "say this", false, 0},
		{Tokenize, `{"model":"m","prompt":"tok"}`, "tok", false, 0},
		{Detokenize, `{"model":"m","tokens":[1,2]}`, "", false, 0},
	} {
		r, err := Parse(tc.kind, []byte(tc.body))
		require.NoError(t, err, tc.body)
		assert.Equal(t, "m", r.Model, tc.body)
		assert.Equal(t, tc.prompt, r.Prompt, tc.body)
		assert.Equal(t, tc.stream, r.Stream, tc.body)
		assert.Equal(t, tc.max, r.MaxTokens, tc.body)
		assert.Equal(t, tc.body, string(r.Body), "the body is kept as sent")
	}
	for _, tc := range []struct {
		kind  Kind
		body  string
		param string
	}{
		{Embeddings, `{"input":"x"}`, "model"},
		{Tokenize, `{"model":5}`, "model"},
		{Responses, `{"model":"m","stream":"yes"}`, "stream"},
		{Responses, `{"model":"m","max_output_tokens":-1}`, "max_output_tokens"},
		{Score, `[1]`, ""},
		{Transcriptions, `{"model":"m"}`, ""},
	} {
		_, err := Parse(tc.kind, []byte(tc.body))
		var e *Error
		require.ErrorAs(t, err, &e, tc.body)
		assert.Equal(t, tc.param, e.Param, tc.body)
	}
}

// form builds a transcription upload: an audio file part between other fields.
func form(t *testing.T, model string, audio []byte) (body []byte, contentType string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	require.NoError(t, mw.WriteField("language", "en"))
	fw, err := mw.CreateFormFile("file", "a.wav")
	require.NoError(t, err)
	_, _ = fw.Write(audio)
	if model != "" {
		require.NoError(t, mw.WriteField("model", model))
	}
	require.NoError(t, mw.WriteField("stream", "true"))
	require.NoError(t, mw.Close())
	return b.Bytes(), mw.FormDataContentType()
}

func TestParseMultipartAndRewriteModel(t *testing.T) {
	audio := bytes.Repeat([]byte("RIFF\x00wav"), 1000)
	body, ct := form(t, "whisper", audio)
	r, err := ParseContent(Transcriptions, ct, body)
	require.NoError(t, err)
	assert.Equal(t, "whisper", r.Model)
	assert.True(t, r.Stream)
	assert.Equal(t, ct, r.ContentType)

	out, err := RewriteFormModel(body, ct, "openai/whisper-large-v3")
	require.NoError(t, err)
	again, err := ParseContent(Transcriptions, ct, out)
	require.NoError(t, err, "the rewritten body keeps the boundary of the Content-Type sent on")
	assert.Equal(t, "openai/whisper-large-v3", again.Model)
	mr := multipart.NewReader(bytes.NewReader(out), strings.TrimPrefix(ct, "multipart/form-data; boundary="))
	fields := map[string][]byte{}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		fields[p.FormName()], _ = io.ReadAll(p)
	}
	assert.Equal(t, audio, fields["file"], "the file is copied byte for byte")
	assert.Equal(t, "en", string(fields["language"]))

	body, ct = form(t, "", audio)
	_, err = ParseContent(Translations, ct, body)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "model", e.Param)
	_, err = ParseContent(Transcriptions, "application/json", []byte(`{"model":"m"}`))
	require.ErrorAs(t, err, &e)
	assert.Contains(t, e.Message, "multipart/form-data")
	big := bytes.Repeat([]byte("x"), formFieldMax+1)
	body, ct = form(t, string(big), nil)
	_, err = ParseContent(Transcriptions, ct, body)
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "model", e.Param)
}
