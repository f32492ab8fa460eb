package openaierror

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, c := range []struct {
		name string
		e    Error
		want string
	}{
		{"OpenAI style, with a param", Error{Message: "no such model", Type: "not_found_error", Param: "model", Code: "model_not_found"},
			`{"error":{"message":"no such model","type":"not_found_error","param":"model","code":"model_not_found"}}` + "\n"},
		{"vLLM style, param null", Error{Message: "bad", Type: "BadRequestError", Code: 400},
			`{"error":{"message":"bad","type":"BadRequestError","param":null,"code":400}}` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Write(rec, http.StatusNotFound, c.e)
			if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("status %d, Content-Type %q", rec.Code, rec.Header().Get("Content-Type"))
			}
			if got := rec.Body.String(); got != c.want {
				t.Errorf("body\n got %s\nwant %s", got, c.want)
			}
		})
	}
}
