package e2b

// The code interpreter's protocol (port 49999), as E2B's code-interpreter
// server speaks it (template/server of e2b-dev/code-interpreter): POST
// /execute answers an NDJSON stream of stdout, stderr, result, error,
// number_of_executions and end_of_execution lines; /contexts creates,
// lists, restarts and removes contexts. Each call goes to the sandbox's
// agent through Control.Acquire, as the native API's calls do (auth,
// auto-resume, a pause held off, the sandbox's end seen at once), and its
// events are translated here: the agent and its kernel are Lizard's one
// implementation, and the E2B semantics (every representation of a
// result, quoted text unquoted) live on this surface only.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// interpreter serves the code interpreter's routes; r's path is the
// interpreter's own (/execute, /contexts...).
func (h *Handler) interpreter(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/execute" && r.Method == http.MethodPost:
		h.execute(w, r)
	case p == "/contexts" && r.Method == http.MethodPost:
		h.createContext(w, r)
	case p == "/contexts" && r.Method == http.MethodGet:
		h.listContexts(w, r)
	case strings.HasPrefix(p, "/contexts/") && strings.HasSuffix(p, "/restart") && r.Method == http.MethodPost:
		h.contextCall(w, r, http.MethodPost, strings.TrimSuffix(strings.TrimPrefix(p, "/contexts/"), "/restart"), "/restart")
	case strings.HasPrefix(p, "/contexts/") && r.Method == http.MethodDelete:
		h.contextCall(w, r, http.MethodDelete, strings.TrimPrefix(p, "/contexts/"), "")
	case p == "/health" && r.Method == http.MethodGet:
		api.WriteJSON(w, http.StatusOK, "OK")
	default:
		writeText(w, http.StatusNotFound, r.Method+" "+p+" is not part of the code interpreter's protocol")
	}
}

// writeText answers an interpreter error as E2B's interpreter does: plain
// text, which the SDKs put in their exception as it is.
func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, msg)
}

// language maps E2B's language names onto the agent's: Python contexts,
// JavaScript and TypeScript in a stateful Node process (as E2B's
// JavaScript kernel: the E2B surface asks for it, Lizard's own API runs
// JavaScript per call), per-call bash, and R (IRkernel, E2B's own R
// kernel) and Java (JShell) kernels, stateful on both surfaces.
func language(l string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(l)) {
	case "", "python", "python3":
		return "python", nil
	case "js", "javascript":
		return "javascript", nil
	case "ts", "typescript":
		return "typescript", nil
	case "bash", "sh":
		return "bash", nil
	case "r":
		return "r", nil
	case "java":
		return "java", nil
	case "deno":
		return "", notImplemented("%s contexts are not supported by Lizard's code interpreter: it runs python, javascript, typescript, bash, r and java (docs/e2b.md)", l)
	}
	return "", badRequest("unknown language %q: Lizard's code interpreter runs python, javascript, typescript, bash, r and java", l)
}

// stateful reports whether E2B's kernel for lang keeps its variables in a
// Node process (Python's kernel keeps them anyway; bash runs per call).
func stateful(lang string) bool { return lang == "javascript" || lang == "typescript" }

// executeRequest is E2B's ExecutionRequest.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// MaxContextAnswer bounds one JSON answer of the agent to the code
// interpreter's calls (a context, the list of contexts; /execute's lines
// have their own bound, api.MaxExecuteLine): code in the sandbox can
// replace the agent and answer without end, which would be held whole in
// the API process. A list of 250 contexts with cwds of PATH_MAX fits; a
// sandbox holds some tens of kernels at most.
const MaxContextAnswer = 1 << 20

// agentCall sends one request to the target sandbox's agent, through the
// agent proxy's transport as every surface's calls go (its span, its
// outcome, the sandbox's end). The caller releases the call once it is
// done with the response.
func (h *Handler) agentCall(r *http.Request, method, path string, body any) (*http.Response, agentproxy.Call, error) {
	t, _ := Target(r.Context())
	call, err := h.cfg.Control.Acquire(r.Context(), t.ProjectID, t.SandboxID)
	if err != nil {
		return nil, call, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			call.Release()
			return nil, call, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(call.Ctx, method, "http://sandbox/v1/sandboxes/"+t.SandboxID+path, rd)
	if err != nil {
		call.Release()
		return nil, call, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tr := &agentproxy.Transport{Call: call, Base: h.cfg.Control.Transport(), Observe: h.cfg.Observe, MaxJSON: MaxContextAnswer}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		call.Release()
		return nil, call, fmt.Errorf("calling the sandbox's agent: %w", err)
	}
	return resp, call, nil
}

// agentFailed answers an agent's refusal (a context not found, a bad
// argument) with its status and message, as plain text.
func agentFailed(w http.ResponseWriter, resp *http.Response) {
	var e api.Error
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	msg := string(b)
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	writeText(w, resp.StatusCode, msg)
}

// callFailed answers an error met before the agent answered.
func (h *Handler) callFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errdefs.ErrGone) || errors.Is(err, errdefs.ErrNotFound) {
		// E2B's proxy answers 502 for a sandbox that is no more; the SDKs
		// read it as the sandbox's timeout.
		api.WriteJSON(w, http.StatusBadGateway, apiError{Code: http.StatusBadGateway, Message: errdefs.Message(err)})
		return
	}
	status, msg := h.classify(err)
	if status >= 500 {
		h.log.Error("E2B interpreter call failed", "path", r.URL.Path, "status", status, "err", err)
	}
	writeText(w, status, msg)
}

func (h *Handler) execute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if err := decode(r, &req); err != nil {
		h.callFailed(w, r, err)
		return
	}
	if req.ContextID != "" && req.Language != "" {
		writeText(w, http.StatusBadRequest, "Only one of context_id or language can be provided")
		return
	}
	areq := api.ExecuteRequest{Code: req.Code, ContextID: req.ContextID, Envs: req.EnvVars, Bundle: true}
	if req.ContextID == "" {
		lang, err := language(req.Language)
		if err != nil {
			h.callFailed(w, r, err)
			return
		}
		areq.Language = lang
		areq.Stateful = stateful(lang)
	}
	// E2B's interpreter puts no bound on a run: the SDK's timeout closes
	// the connection, which ends the agent's run.
	noLimit := int64(0)
	areq.TimeoutMs = &noLimit
	resp, call, err := h.agentCall(r, http.MethodPost, "/execute", areq)
	if err != nil {
		h.callFailed(w, r, err)
		return
	}
	defer call.Release()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		agentFailed(w, resp)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	in := bufio.NewReaderSize(resp.Body, 64<<10)
	enc := json.NewEncoder(w)
	for {
		line, err := readLine(in, api.MaxExecuteLine)
		if errors.Is(err, errLineTooLong) {
			// The agent bounds its lines; code in the sandbox (root) may
			// have replaced it. The line is not held: the run ends here,
			// the agent's connection closed under it.
			h.log.Warn("agent sent an /execute line past its bound", "max_bytes", api.MaxExecuteLine)
			for _, ev := range []api.ExecuteEvent{{Type: api.EventError, Error: &api.ExecutionError{Name: api.ErrorNameResultTooLarge,
				Message: fmt.Sprintf("result too large: over %d bytes, limit %d", api.MaxExecuteLine, api.MaxResultBytes)}}, {Type: api.EventEnd}} {
				for _, out := range translate(ev) {
					enc.Encode(out)
				}
			}
			rc.Flush()
			return
		}
		if len(line) > 0 && err == nil {
			var ev api.ExecuteEvent
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				h.log.Warn("agent sent an /execute line that does not parse", "err", jerr)
				cut(call, stopWait)
			}
			if ev.Type == api.EventAbort {
				// The sandbox's end, as a node in a cluster tells it.
				rc.Flush()
				cut(call, 0)
			}
			for _, out := range translate(ev) {
				enc.Encode(out)
			}
			if ev.Type == api.EventEnd {
				rc.Flush()
				return
			}
			if in.Buffered() == 0 {
				rc.Flush()
			}
			continue
		}
		if r.Context().Err() != nil {
			return // the client went away; the agent's run ended with it
		}
		// The stream broke before its end: the sandbox stopped (killed,
		// expired, died) or its agent did.
		rc.Flush()
		cut(call, stopWait)
	}
}

// errLineTooLong is a stream line past readLine's bound.
var errLineTooLong = errors.New("line too long")

// readLine reads one line of at most max bytes, its newline included, as
// bufio.Reader.ReadBytes does, but holds no more than that: a longer line
// is errLineTooLong, its rest unread.
func readLine(in *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := in.ReadSlice('\n')
		if len(line)+len(frag) > max {
			return nil, errLineTooLong
		}
		line = append(line, frag...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

// stopWait bounds how long a stream cut under way waits for the node to
// see its sandbox's end, so that the SDK's check that follows (is the
// sandbox running?) already hears that it is not.
const stopWait = 2 * time.Second

// cut ends an /execute stream that cannot be finished by breaking the
// connection, once the call's context has ended or wait has passed: E2B's
// SDKs then ask whether the sandbox still runs and raise their
// TimeoutException ("the sandbox was killed while the request was in
// progress") if not. A last line would be read as a normal end instead.
func cut(call agentproxy.Call, wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-call.Ctx.Done():
	case <-t.C:
	}
	panic(http.ErrAbortHandler)
}

// translate turns one agent event into the code interpreter's lines.
func translate(ev api.ExecuteEvent) []any {
	switch ev.Type {
	case api.EventStdout, api.EventStderr:
		return []any{outputLine{Type: ev.Type, Text: ev.Text, Timestamp: time.Now().UTC().Format(time.RFC3339Nano)}}
	case api.EventResult:
		if ev.Result == nil {
			return nil
		}
		return []any{resultLine(ev)}
	case api.EventError:
		if ev.Error == nil {
			return nil
		}
		return []any{errorLine{Type: "error", Name: ev.Error.Name, Value: ev.Error.Message, Traceback: ev.Error.Traceback}}
	case api.EventEnd:
		if ev.ExecutionCount > 0 {
			return []any{countLine{Type: "number_of_executions", ExecutionCount: ev.ExecutionCount}, typeLine{Type: "end_of_execution"}}
		}
		return []any{typeLine{Type: "end_of_execution"}}
	}
	return nil
}

type outputLine struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Timestamp string `json:"timestamp"`
}

type errorLine struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

type countLine struct {
	Type           string `json:"type"`
	ExecutionCount int    `json:"execution_count"`
}

type typeLine struct {
	Type string `json:"type"`
}

// formats maps MIME types onto the fields of E2B's Result.
var formats = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// jsonValued are the fields whose value is JSON, not text.
var jsonValued = map[string]bool{"json": true, "data": true, "chart": true}

// resultLine is E2B's Result: every representation of the output under
// its field, the MIME types E2B has no field for under extra, and
// is_main_result for the cell's last expression (execute_result).
func resultLine(ev api.ExecuteEvent) map[string]any {
	bundle := ev.Bundle
	if bundle == nil {
		// Output with one MIME type (the agent gives JavaScript and bash
		// results so); data is text, or JSON text for a JSON type.
		raw, _ := json.Marshal(ev.Result.Data)
		if _, isJSON := jsonValued[formats[ev.Result.Mime]]; isJSON && json.Valid([]byte(ev.Result.Data)) {
			raw = json.RawMessage(ev.Result.Data)
		}
		bundle = map[string]json.RawMessage{ev.Result.Mime: raw}
	}
	out := map[string]any{"type": "result", "is_main_result": ev.Result.Type == api.ResultTypeResult}
	extra := map[string]any{}
	for mime, raw := range bundle {
		field, known := formats[mime]
		switch {
		case !known:
			extra[mime] = raw
		case jsonValued[field]:
			out[field] = raw
		default:
			out[field] = mimeText(mime, raw)
		}
	}
	if t, ok := out["text"].(string); ok {
		out["text"] = unquote(t)
	}
	if len(extra) > 0 {
		out["extra"] = extra
	}
	return out
}

// mimeText is a bundle's text value: a string, or a list of lines as
// nbformat allows; base64 images without Jupyter's trailing newline.
func mimeText(mime string, raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
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

// unquote takes the quotes off a string's repr, as E2B's interpreter
// does: 'hello' reads hello.
func unquote(t string) string {
	if len(t) >= 2 && ((t[0] == '\'' && t[len(t)-1] == '\'') || (t[0] == '"' && t[len(t)-1] == '"')) {
		return t[1 : len(t)-1]
	}
	return t
}

// contextRequest is E2B's CreateContext.
type contextRequest struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// e2bHome is where E2B's contexts start by default; Lizard's are in the
// sandbox user's home, which the agent picks when none is given.
const e2bHome = "/home/user"

func (h *Handler) createContext(w http.ResponseWriter, r *http.Request) {
	var req contextRequest
	if err := decode(r, &req); err != nil {
		h.callFailed(w, r, err)
		return
	}
	lang, err := language(req.Language)
	if err != nil {
		h.callFailed(w, r, err)
		return
	}
	cwd := req.Cwd
	if cwd == e2bHome {
		cwd = ""
	}
	var c api.Context
	// E2B's JavaScript kernel keeps its variables: so do its contexts here.
	// E2B's interpreter runs its kernels as root (code written for it makes
	// contexts in /root): so do the contexts made here. It opens nothing
	// new: the same caller may run any command as root (user="root").
	creq := api.CreateContextRequest{Language: lang, Cwd: cwd, Stateful: stateful(lang), User: "root"}
	if h.agentJSON(w, r, http.MethodPost, "/contexts", creq, &c) {
		api.WriteJSON(w, http.StatusOK, c)
	}
}

func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request) {
	var list api.ContextList
	if h.agentJSON(w, r, http.MethodGet, "/contexts", nil, &list) {
		if list.Contexts == nil {
			list.Contexts = []api.Context{}
		}
		api.WriteJSON(w, http.StatusOK, list.Contexts)
	}
}

// contextCall restarts or removes context id; E2B answers null.
func (h *Handler) contextCall(w http.ResponseWriter, r *http.Request, method, id, suffix string) {
	if id == "" || strings.Contains(id, "/") {
		writeText(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
		return
	}
	if h.agentJSON(w, r, method, "/contexts/"+id+suffix, nil, nil) {
		api.WriteJSON(w, http.StatusOK, nil)
	}
}

// agentJSON makes one JSON call to the agent and decodes its answer into
// out (nil: the answer is dropped); false when it has answered w with the
// failure.
func (h *Handler) agentJSON(w http.ResponseWriter, r *http.Request, method, path string, body, out any) bool {
	resp, call, err := h.agentCall(r, method, path, body)
	if err != nil {
		h.callFailed(w, r, err)
		return false
	}
	defer call.Release()
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		agentFailed(w, resp)
		return false
	}
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return true
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		h.callFailed(w, r, fmt.Errorf("reading the agent's answer to %s %s: %w", method, path, err))
		return false
	}
	return true
}
