package pykernel

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

func (m *message) errorEvent() api.ExecuteEvent {
	return api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{
		Name:      m.Ename,
		Message:   m.Evalue,
		Traceback: stripANSI(strings.Join(m.Traceback, "\n")),
	}}
}

// resultEvent turns a result or display message into an event with the
// richest MIME type of its bundle. A display update (display_id) is a new
// display result carrying the new data: the API streams events and cannot
// take back one already sent; for the same reason clear_output has no
// event. With bundle the event carries the whole bundle too. ok is false
// for messages that carry nothing for the client.
func (m *message) resultEvent(bundle bool) (ev api.ExecuteEvent, ok bool) {
	switch m.T {
	case "result":
		return ResultEvent(api.ResultTypeResult, m.Data, bundle)
	case "display":
		return ResultEvent(api.ResultTypeDisplay, m.Data, bundle)
	}
	return ev, false
}

// ResultEvent is the event of a Jupyter MIME bundle (data) of a result
// (api.ResultTypeResult) or a display: its richest MIME type, and with
// bundle the whole bundle too. ok is false when data holds nothing. The
// agent's R contexts, whose kernel is a Jupyter one, use it too.
func ResultEvent(typ string, data map[string]json.RawMessage, bundle bool) (ev api.ExecuteEvent, ok bool) {
	mime, text, found := pickMime(data)
	if !found {
		return ev, false
	}
	ev = api.ExecuteEvent{Type: api.EventResult, Result: &api.Result{Type: typ, Mime: mime, Data: text}}
	if bundle {
		ev.Bundle = data
	}
	return ev, true
}
