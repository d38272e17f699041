package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lizard-build/lizard/api"
)

func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	api.WriteJSON(w, status, api.Error{Code: code, Message: fmt.Sprintf(format, args...)})
}

// invalid answers 400 with a message that starts with the offending field.
func invalid(w http.ResponseWriter, field, format string, args ...any) {
	writeError(w, http.StatusBadRequest, api.CodeInvalidArgument, field+": "+format, args...)
}

// decoder reads request bodies of at most max bytes.
type decoder struct{ max int64 }

// decode reads a JSON body into v, answering 400 or 413 itself when it
// cannot. An empty body leaves v as is when emptyOK. As on the server,
// unknown fields and nulls are refused (api/openapi.yaml): a misspelt or
// newer option fails loudly instead of being ignored.
func (d decoder) decode(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, d.max))
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(api.IntegralNumbers(data)))
		dec.DisallowUnknownFields()
		if err = dec.Decode(v); err == nil && dec.More() {
			err = errors.New("more than one JSON value; send one object")
		}
	}
	var tooBig *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		if path, ok := api.NullAt(data); ok {
			if path == "" {
				path = "body"
			}
			invalid(w, path, "must not be null; leave it out or give it a value")
			return false
		}
		// A required string the Go type cannot tell absent from "".
		if _, ok := v.(*api.ExecuteRequest); ok && !hasField(data, "code") {
			invalid(w, "code", "is required (\"\" runs nothing)")
			return false
		}
		return true
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "request body is larger than %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF) && emptyOK:
		return true
	case errors.Is(err, io.EOF):
		invalid(w, "body", "a JSON object is required")
	case errors.As(err, &typeErr) && typeErr.Field != "":
		invalid(w, typeErr.Field, "must be %s, not JSON %s", typeErr.Type, typeErr.Value)
	case errors.As(err, &typeErr):
		invalid(w, "body", "must be a JSON object, not JSON %s", typeErr.Value)
	default:
		invalid(w, "body", "invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return false
}

// hasField reports whether the JSON object data has the field name.
func hasField(data []byte, name string) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil {
		return false
	}
	_, ok := fields[name]
	return ok
}

// checkEnvs rejects names and values the kernel cannot set.
func checkEnvs(w http.ResponseWriter, envs map[string]string) bool {
	for k, v := range envs {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			invalid(w, "envs", "invalid variable name %q", k)
			return false
		}
		if strings.ContainsRune(v, 0) {
			invalid(w, "envs", "value of %s contains a NUL byte", k)
			return false
		}
	}
	return true
}

// timeoutOf turns a request's timeoutMs into a duration: def when absent,
// 0 (no limit) for 0.
func timeoutOf(w http.ResponseWriter, ms *int64, def int64) (int64, bool) {
	if ms == nil {
		return def, true
	}
	if *ms < 0 {
		invalid(w, "timeoutMs", "must not be negative")
		return 0, false
	}
	return *ms, true
}
