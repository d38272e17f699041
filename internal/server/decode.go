package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// MaxJSONBody bounds a JSON request body. Proxied bodies (file uploads) are
// streamed to the agent and not bound by it.
const MaxJSONBody = 1 << 20

// decodeJSON decodes r's body, one JSON object, into v. Unknown fields are
// refused, so that a misspelt option ("timeout_ms") is an error instead of
// being silently ignored, and so is a null anywhere (no field is nullable:
// leave it out instead). An empty body is {} when allowEmpty.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	return decodeJSONMax(w, r, v, allowEmpty, MaxJSONBody)
}

// decodeJSONMax is decodeJSON with a body of up to limit bytes.
func decodeJSONMax(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool, limit int64) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			if limit != MaxJSONBody {
				return &errdefs.Error{Kind: errdefs.ErrTooLarge,
					Msg: fmt.Sprintf("the request body is over the %d MiB limit of this request", limit>>20)}
			}
			return tooLarge()
		}
		return errdefs.Invalidf("reading the request body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(api.IntegralNumbers(data)))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if errors.Is(err, io.EOF) {
		if allowEmpty {
			return nil
		}
		return errdefs.Invalidf("the request body is empty; send a JSON object")
	}
	if err != nil {
		return jsonError(err, v)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errdefs.Invalidf("the request body holds more than one JSON value; send one object")
	}
	if path, ok := api.NullAt(data); ok {
		if path == "" {
			return errdefs.Invalidf("the request body must be a JSON object, not null")
		}
		return errdefs.Invalidf("field %q is null; leave it out or give it a value", path)
	}
	return checkBounds(v, data)
}

// checkBounds enforces the fixed bounds api/openapi.yaml gives request
// fields, here at the edge, so that they hold on every path a request
// takes (booting, restoring a snapshot, forking). The bounds a server is
// configured with (--max-memory-mb...) are the control plane's to check.
func checkBounds(v any, data []byte) error {
	nonNegative := func(name string, ms *int64) error {
		if ms != nil && *ms < 0 {
			return errdefs.Invalidf("%s %d is out of range: want 0 or more milliseconds (0: no limit)", name, *ms)
		}
		return nil
	}
	switch req := v.(type) {
	case *api.CreateSandboxRequest:
		// An empty template is absent to the Go type; given, it names
		// nothing (the spec's pattern refuses it).
		var given struct{ Template *string }
		if json.Unmarshal(data, &given) == nil && given.Template != nil && *given.Template == "" {
			return errdefs.Invalidf("template is empty: name one, or leave it out for the default (interpreter)")
		}
		switch {
		case req.MemoryMb != nil && *req.MemoryMb < 64:
			return errdefs.Invalidf("memoryMb %d is out of range: want at least 64", *req.MemoryMb)
		case req.Cpus != nil && !(*req.Cpus >= 0.1):
			return errdefs.Invalidf("cpus %g is out of range: want at least 0.1", *req.Cpus)
		case req.DiskMb != nil && *req.DiskMb < 16:
			return errdefs.Invalidf("diskMb %d is out of range: want at least 16", *req.DiskMb)
		}
		return nonNegative("timeoutMs", req.TimeoutMs)
	case *api.ForkRequest:
		// Count 0 is absent to the Go type; given, it is a mistake.
		var given struct{ Count *json.RawMessage }
		if json.Unmarshal(data, &given) == nil && given.Count != nil && req.Count == 0 || req.Count < 0 || req.Count > 16 {
			return errdefs.Invalidf("count %d is out of range: want 1 to 16 forks", req.Count)
		}
		return nonNegative("timeoutMs", req.TimeoutMs)
	case *api.BuildTemplateRequest:
		var given struct {
			Recipe *struct {
				Base, Workdir *string
				Files         []struct{ Owner *string }
				Run           []struct{ User *string }
				Steps         []map[string]json.RawMessage
			}
		}
		if json.Unmarshal(data, &given) != nil {
			return nil
		}
		r := given.Recipe
		if r == nil {
			return errdefs.Invalidf("recipe is required: give the template's recipe, {} for its base as it is (docs/templates.md)")
		}
		// Empty strings are absent to the Go types; given, they break the
		// spec's enums and patterns: each is an error naming its field.
		empty := func(p *string) bool { return p != nil && *p == "" }
		switch {
		case empty(r.Base):
			return errdefs.Invalidf("recipe.base is empty: leave it out for the default (interpreter)")
		case empty(r.Workdir):
			return errdefs.Invalidf("recipe.workdir is empty: leave it out for the default (/home/user)")
		}
		for i, f := range r.Files {
			if empty(f.Owner) {
				return errdefs.Invalidf("recipe.files[%d].owner is empty: leave it out for the default (user)", i)
			}
		}
		for i, c := range r.Run {
			if empty(c.User) {
				return errdefs.Invalidf("recipe.run[%d].user is empty: leave it out for the default (root)", i)
			}
		}
		// A step is exactly one kind, counted as given: an empty value
		// is absent to the Go type.
		for i, st := range r.Steps {
			if len(st) != 1 {
				return errdefs.Invalidf("recipe.steps[%d] has %d kinds: want exactly one of run, copy, env, workdir, user, apt, pip or symlink", i, len(st))
			}
			var step struct {
				Run  *struct{ User *string }
				Copy []struct{ Owner *string }
			}
			b, _ := json.Marshal(st)
			if json.Unmarshal(b, &step) != nil {
				continue
			}
			if step.Run != nil && empty(step.Run.User) {
				return errdefs.Invalidf("recipe.steps[%d].run.user is empty: leave it out for the default (the last user step's, root before any)", i)
			}
			for j, f := range step.Copy {
				if empty(f.Owner) {
					return errdefs.Invalidf("recipe.steps[%d].copy[%d].owner is empty: leave it out for the default (user)", i, j)
				}
			}
		}
	case *api.ResumeRequest:
		return nonNegative("timeoutMs", req.TimeoutMs)
	case *api.SetTimeoutRequest:
		return nonNegative("timeoutMs", req.TimeoutMs)
	}
	return nil
}

func tooLarge() error {
	return &errdefs.Error{Kind: errdefs.ErrTooLarge,
		Msg: "the request body is over the 1 MiB limit for JSON requests"}
}

// jsonError turns a decoding error into a 400 that names the field, or a
// 413.
func jsonError(err error, v any) error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return tooLarge()
	case errors.As(err, &se):
		return errdefs.Invalidf("malformed JSON at byte %d of the request body: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errdefs.Invalidf("malformed JSON: the request body ends in the middle of a value")
	case errors.As(err, &te):
		if te.Field == "" {
			return errdefs.Invalidf("the request body must be a JSON object, not %s", article(te.Value))
		}
		// For a map the decoder names the field but gives the element's
		// type: say that it is the values that are wrong.
		if ft := fieldType(v, te.Field); ft != nil && ft.Kind() == reflect.Map && ft.Elem() == te.Type {
			return errdefs.Invalidf("values in field %q must be %ss, not %s", te.Field, strings.TrimPrefix(describe(te.Type), "a "), article(te.Value))
		}
		return errdefs.Invalidf("field %q must be %s, not %s", te.Field, describe(te.Type), article(te.Value))
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return errdefs.Invalidf("unknown field %s in the request body; known fields: %s", f, strings.Join(fieldNames(v), ", "))
	}
	return errdefs.Invalidf("invalid request body: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// describe names what a Go type accepts in JSON.
func describe(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map:
		return "an object of " + strings.TrimPrefix(strings.TrimPrefix(describe(t.Elem()), "a "), "an ") + "s"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct:
		return "an object"
	}
	return t.String()
}

// article turns the decoder's description of a JSON value ("string",
// "number 1.5", "array") into prose.
func article(v string) string {
	switch {
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	case v == "array" || v == "object":
		return "an " + v
	case v == "bool":
		return "a boolean"
	}
	return "a " + v
}

// fieldNames lists the JSON names of v's fields.
func fieldNames(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// fieldType returns the type of v's field with JSON name name, or nil.
func fieldType(v any, name string) reflect.Type {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); n == name {
			return t.Field(i).Type
		}
	}
	return nil
}
