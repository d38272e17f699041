package jupyter

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sort"
	"strings"

	"github.com/lizard-build/lizard/api"
)

// mimeOrder lists the MIME types a result may carry, richest first. A
// result keeps only the first one its output offers.
var mimeOrder = []string{
	"image/png",
	"image/jpeg",
	"image/svg+xml",
	"text/html",
	"text/markdown",
	"application/json",
	"text/latex",
	"text/plain",
}

// pickMime chooses the richest representation of a display bundle and
// returns it as text: strings as they are (base64 images without the
// trailing newline Jupyter adds), JSON values as compact JSON text.
func pickMime(data map[string]json.RawMessage) (mime, text string, ok bool) {
	for _, m := range mimeOrder {
		if raw, found := data[m]; found {
			return m, mimeText(m, raw), true
		}
	}
	// Nothing we rank (a widget, a plotly figure without a fallback): take
	// the alphabetically first so the choice is stable.
	keys := make([]string, 0, len(data))
	for m := range data {
		keys = append(keys, m)
	}
	if len(keys) == 0 {
		return "", "", false
	}
	sort.Strings(keys)
	return keys[0], mimeText(keys[0], data[keys[0]]), true
}

func mimeText(mime string, raw json.RawMessage) string {
	if mime == "application/json" || strings.HasSuffix(mime, "+json") {
		var buf bytes.Buffer
		if json.Compact(&buf, raw) != nil {
			return string(raw)
		}
		return buf.String()
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		// nbformat allows multi-line strings as lists of lines.
		var lines []string
		if json.Unmarshal(raw, &lines) != nil {
			return string(raw)
		}
		s = strings.Join(lines, "")
	}
	if strings.HasPrefix(mime, "image/") && mime != "image/svg+xml" {
		s = strings.TrimRight(s, "\n")
	}
	return s
}

// ansi matches terminal escape sequences: CSI (colours, cursor moves), OSC
// (titles, hyperlinks) and two-byte escapes. IPython colours tracebacks;
// clients want plain text.
var ansi = regexp.MustCompile("\x1b(?:\\[[0-?]*[ -/]*[@-~]|\\][^\x07\x1b]*(?:\x07|\x1b\\\\)|[@-Z\\\\-_])")

func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansi.ReplaceAllString(s, "")
}

// errorContent is the content of an iopub "error" message and of an
// execute_reply whose status is "error".
type errorContent struct {
	Ename     string   `json:"ename"`
	Evalue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

func (e errorContent) event() api.ExecuteEvent {
	return api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{
		Name:      e.Ename,
		Message:   e.Evalue,
		Traceback: stripANSI(strings.Join(e.Traceback, "\n")),
	}}
}

// outputEvent turns an iopub output message into an event. ok is false for
// messages that carry nothing for the client (clear_output, comms, ...).
// error messages are handled by the caller, which may replace them.
func outputEvent(m *message) (ev api.ExecuteEvent, ok bool) {
	switch m.Header.MsgType {
	case "stream":
		var c struct {
			Name string `json:"name"`
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &c) != nil || c.Text == "" {
			return ev, false
		}
		typ := api.EventStdout
		if c.Name == "stderr" {
			typ = api.EventStderr
		}
		return api.ExecuteEvent{Type: typ, Text: c.Text}, true
	case "execute_result", "display_data", "update_display_data":
		var c struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if json.Unmarshal(m.Content, &c) != nil {
			return ev, false
		}
		mime, text, found := pickMime(c.Data)
		if !found {
			return ev, false
		}
		typ := api.ResultTypeDisplay
		if m.Header.MsgType == "execute_result" {
			typ = api.ResultTypeResult
		}
		return api.ExecuteEvent{Type: api.EventResult, Result: &api.Result{Type: typ, Mime: mime, Data: text}}, true
	}
	return ev, false
}
