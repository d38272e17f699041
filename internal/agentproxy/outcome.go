package agentproxy

// How a run ended — a runCode (/execute) or a command (/process) — read by
// the proxy from its stream as it passes, once for every surface: the
// node's events (Call.Outcome), the API's metrics and the call's span
// (Transport.Observe) all take it from here.

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/metrics"
)

// Results a run ends with (Outcome.Result). A runCode: ok, error (the code
// raised), timeout, kernel_died, cut (the stream ended without its end
// event), rejected (not answered 200). A command: ok (exit 0),
// exit_nonzero, timeout (exit 124), failed (could not start), cut,
// rejected.
const (
	ResultOK          = "ok"
	ResultError       = "error"
	ResultTimeout     = "timeout"
	ResultKernelDied  = "kernel_died"
	ResultCut         = "cut"
	ResultRejected    = "rejected"
	ResultExitNonzero = "exit_nonzero"
	ResultFailed      = "failed"
)

// Ops whose outcome is read (Outcome.Op).
const (
	OpExecute = "execute"
	OpProcess = "process"
)

// Outcome is how one run through the proxy ended.
type Outcome struct {
	Op       string // OpExecute or OpProcess
	Language string // a runCode's: python, javascript, bash or unknown
	Result   string // Result*
	// ErrorName and Message are the run's error, when it ended with one.
	ErrorName, Message string
	// KernelDied: the Python kernel died during the run, or since the
	// last one (which this run then started again).
	KernelDied bool
	Took       time.Duration
}

// op is the run r starts, or "" for a call whose outcome is not read.
func op(method, path string) string {
	if method != "POST" {
		return ""
	}
	switch {
	case strings.HasSuffix(path, "/execute"):
		return OpExecute
	case strings.HasSuffix(path, "/process"):
		return OpProcess
	}
	return ""
}

// maxOutcomeLine bounds the lines kept whole: an error or end event.
// Output lines are not kept (they can be large and are none of this
// reader's business), nor an error line past this.
const maxOutcomeLine = 64 << 10

// kernelDiedNotice begins the stderr line the agent writes when a run
// starts on a kernel that died since the last call.
const kernelDiedNotice = "[lizard] the kernel died"

var (
	errorLinePrefix  = []byte(`{"type":"` + api.EventError + `"`)
	endLinePrefix    = []byte(`{"type":"` + api.EventEnd + `"`)
	stderrLinePrefix = []byte(`{"type":"` + api.EventStderr + `","text":"`)
)

// outcomeBody passes a run's stream through and reads its outcome: a
// timeout or a dead kernel is told to notable as its error event goes by
// (before the client has it: the node's event is recorded first), the
// whole outcome to done once the stream ends or is closed.
type outcomeBody struct {
	io.ReadCloser
	o       Outcome
	begin   time.Time
	notable func(errorName, message string)
	done    func(Outcome)
	once    sync.Once

	line    []byte // the current line, while it may be one to keep
	skip    bool   // the current line is not
	sawErr  bool
	sawEnd  bool
	exit    *int
	noticed bool // notable was told
}

func newOutcomeBody(body io.ReadCloser, o Outcome, begin time.Time, notable func(string, string), done func(Outcome)) *outcomeBody {
	return &outcomeBody{ReadCloser: body, o: o, begin: begin, notable: notable, done: done}
}

func (b *outcomeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.scan(p[:n])
	if err != nil {
		b.finish()
	}
	return n, err
}

func (b *outcomeBody) Close() error {
	b.finish()
	return b.ReadCloser.Close()
}

func (b *outcomeBody) scan(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if !b.skip {
			b.line = append(b.line, part...)
			if len(b.line) > maxOutcomeLine && bytes.HasPrefix(b.line, errorLinePrefix) {
				// An error too long to read (a traceback): the code's own,
				// not one the agent writes.
				b.sawErr = true
				b.line, b.skip = b.line[:0], true
			} else if len(b.line) > maxOutcomeLine || !b.mayKeep(b.line) {
				b.line, b.skip = b.line[:0], true
			}
		}
		if i < 0 {
			return
		}
		if !b.skip && len(b.line) > 0 {
			b.check(b.line)
		}
		b.line, b.skip = b.line[:0], false
		p = p[i+1:]
	}
}

// mayKeep reports whether line, so far, may be one check reads.
func (b *outcomeBody) mayKeep(line []byte) bool {
	for _, prefix := range [][]byte{errorLinePrefix, endLinePrefix, stderrLinePrefix} {
		n := min(len(line), len(prefix))
		if bytes.Equal(line[:n], prefix[:n]) {
			if bytes.Equal(prefix, stderrLinePrefix) && len(line) > len(prefix)+len(kernelDiedNotice) {
				// Enough of a stderr line to tell the notice: the
				// check is made now, the rest is output.
				b.check(line)
				return false
			}
			return true
		}
	}
	return false
}

func (b *outcomeBody) check(line []byte) {
	switch {
	case bytes.HasPrefix(line, stderrLinePrefix):
		if bytes.HasPrefix(line[len(stderrLinePrefix):], []byte(kernelDiedNotice)) {
			b.o.KernelDied = true // died since the last call; this one runs on a new kernel
		}
	case bytes.HasPrefix(line, errorLinePrefix):
		var ev api.ExecuteEvent
		if json.Unmarshal(line, &ev) != nil || ev.Error == nil {
			return
		}
		b.sawErr = true
		if b.o.ErrorName == "" {
			b.o.ErrorName, b.o.Message = ev.Error.Name, ev.Error.Message
		}
		if ev.Error.Name == api.ErrorNameKernelDied {
			b.o.KernelDied = true
		}
		if (ev.Error.Name == api.ErrorNameTimeout || ev.Error.Name == api.ErrorNameKernelDied) && !b.noticed {
			b.noticed = true
			if b.notable != nil {
				b.notable(ev.Error.Name, ev.Error.Message)
			}
		}
	case bytes.HasPrefix(line, endLinePrefix):
		var ev struct {
			ExitCode *int `json:"exitCode"`
		}
		if json.Unmarshal(line, &ev) == nil {
			b.sawEnd, b.exit = true, ev.ExitCode
		}
	}
}

// finish reports the outcome, once.
func (b *outcomeBody) finish() {
	b.once.Do(func() {
		b.o.Result = b.result()
		b.o.Took = time.Since(b.begin)
		if b.done != nil {
			b.done(b.o)
		}
	})
}

func (b *outcomeBody) result() string {
	if b.o.Op == OpProcess {
		switch {
		case !b.sawEnd || b.exit == nil:
			return ResultCut
		case *b.exit == 0:
			return ResultOK
		case *b.exit == 124:
			return ResultTimeout
		case *b.exit == -1:
			return ResultFailed
		}
		return ResultExitNonzero
	}
	switch {
	case !b.sawEnd:
		return ResultCut
	case b.o.ErrorName == api.ErrorNameTimeout:
		return ResultTimeout
	case b.o.KernelDied && b.sawErr:
		return ResultKernelDied
	case b.sawErr:
		return ResultError
	}
	return ResultOK
}

// bodyHeadLen bounds what is kept of a runCode's request to find its
// language; code longer than that is labelled "unknown".
const bodyHeadLen = 64 << 10

// headReader passes a request body through, keeping its first bodyHeadLen
// bytes.
type headReader struct {
	r    io.ReadCloser
	mu   sync.Mutex
	head []byte
	over bool
}

func (h *headReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := bodyHeadLen - len(h.head); room > 0 {
		h.head = append(h.head, p[:min(n, room)]...)
		h.over = n > room
	} else if n > 0 {
		h.over = true
	}
	return n, err
}

func (h *headReader) Close() error { return h.r.Close() }

// language is the runCode's language as far as its body was read.
func (h *headReader) language() string {
	if h == nil {
		return "unknown"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.over {
		return "unknown"
	}
	var req struct {
		Language string `json:"language"`
	}
	if json.Unmarshal(h.head, &req) != nil {
		return "unknown"
	}
	// A contextId's own language wins over the field; the console and the
	// SDKs send both, so the field is right in practice.
	switch strings.ToLower(strings.TrimSpace(req.Language)) {
	case "", "python", "py", "python3":
		return "python"
	case "javascript", "js", "node", "nodejs":
		return "javascript"
	case "bash", "sh", "shell":
		return "bash"
	}
	return "unknown"
}

// Metered is an Observe that counts each run in m (nil: none).
func Metered(m *metrics.Metrics) func(Outcome) {
	if m == nil {
		return nil
	}
	return func(o Outcome) {
		switch o.Op {
		case OpExecute:
			m.Execution(o.Language, o.Result, o.KernelDied, o.Took)
		case OpProcess:
			m.Process(o.Result, o.Took)
		}
	}
}
