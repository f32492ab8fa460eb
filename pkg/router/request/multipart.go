package request

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"strconv"
	"strings"
)

// formFieldMax bounds a form field the router reads (model, stream): they are names and
// flags; a larger one is not what the API sends.
const formFieldMax = 4 << 10

// ParseContent reads body, sent with the given Content-Type, as a request of kind: a
// multipart/form-data upload for the audio kinds, JSON for the others (Parse).
func ParseContent(kind Kind, contentType string, body []byte) (*Request, error) {
	e, ok := lookup(kind)
	if !ok || !e.form {
		return Parse(kind, body)
	}
	return parseForm(e, contentType, body)
}

// parseForm reads a multipart/form-data body (already bounded by the router's body limit)
// for its model and stream fields. File parts are skipped, never copied: the body is held
// once, as it must be for a retry to resend it.
func parseForm(e endpoint, contentType string, body []byte) (*Request, error) {
	boundary, err := formBoundary(contentType)
	if err != nil {
		return nil, &Error{Message: e.path + ": " + err.Error()}
	}
	r := &Request{Kind: e.kind, Body: body, ContentType: contentType}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &Error{Message: "request body is not valid multipart/form-data: " + err.Error()}
		}
		name := p.FormName()
		if p.FileName() != "" || (name != "model" && name != "stream") {
			continue // the next NextPart skips what is left of it
		}
		v, err := io.ReadAll(io.LimitReader(p, formFieldMax+1))
		if err != nil {
			return nil, &Error{Param: name, Message: fmt.Sprintf("reading form field %s: %v", name, err)}
		}
		if len(v) > formFieldMax {
			return nil, &Error{Param: name, Message: fmt.Sprintf("form field %s is longer than %d bytes", name, formFieldMax)}
		}
		switch name {
		case "model":
			r.Model = strings.TrimSpace(string(v))
		case "stream":
			if r.Stream, err = strconv.ParseBool(strings.TrimSpace(string(v))); err != nil {
				return nil, &Error{Param: "stream", Message: "form field stream must be true or false"}
			}
		}
	}
	if r.Model == "" {
		return nil, &Error{Param: "model", Message: "model is required: berth-router routes " + e.path + " by the model form field"}
	}
	return r, nil
}

func formBoundary(contentType string) (string, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" {
		return "", fmt.Errorf("Content-Type %q: send multipart/form-data", contentType)
	}
	if params["boundary"] == "" {
		return "", errors.New("Content-Type multipart/form-data has no boundary")
	}
	return params["boundary"], nil
}

// RewriteFormModel returns a multipart/form-data body (with the boundary of contentType)
// whose model field is model; every other part, files included, is copied as sent, under
// the same boundary, so the Content-Type stays valid.
func RewriteFormModel(body []byte, contentType, model string) ([]byte, error) {
	boundary, err := formBoundary(contentType)
	if err != nil {
		return nil, err
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var out bytes.Buffer
	out.Grow(len(body) + len(model))
	mw := multipart.NewWriter(&out)
	if err := mw.SetBoundary(boundary); err != nil {
		return nil, err
	}
	for {
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		dst, err := mw.CreatePart(p.Header)
		if err != nil {
			return nil, err
		}
		if p.FormName() == "model" && p.FileName() == "" {
			_, err = io.WriteString(dst, model)
		} else {
			_, err = io.Copy(dst, p)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
