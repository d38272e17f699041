package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lizard-build/lizard/api"
)

// maxChunk bounds the text of one stdout/stderr event, so a huge single line
// never becomes one huge JSON line.
const maxChunk = 64 << 10

// flushDelay is how long an event may wait in the response buffer for the
// next one. Events often come in bursts (a result and the end a few
// microseconds later, a flood of output); each flush is a packet through
// gVisor's network stack, the server's proxy and the client, so a burst
// goes out as one, while a lone event is on the wire within this delay.
const flushDelay = time.Millisecond

// sink writes one NDJSON stream response. Output text (stdout, stderr) is
// bounded: past the limit it is dropped and counted, and one stderr marker
// says how much went missing before the next other event. The headers and
// events are flushed within flushDelay of being written, so clients see
// output while code runs. The end event is not flushed here: the handler returns right
// after it (calling close), and net/http then writes it together with the
// end of the chunked body, one packet instead of two.
type sink struct {
	// text makes the wire event for a piece of output.
	text  func(kind, text string) any
	limit int64

	mu        sync.Mutex
	w         http.ResponseWriter
	rc        *http.ResponseController
	enc       *json.Encoder
	failed    bool        // the client went away; stop writing
	closed    bool        // the handler returned: the response is not ours any more
	timer     *time.Timer // flushes what waits in the buffer
	unflushed bool
	ended     bool  // the end event is written; the handler's return sends it
	sent      int64 // output bytes forwarded
	truncated bool
	dropped   int64 // output bytes dropped since the last marker
	results   int64 // bytes of result lines sent (api.MaxResultBytes)
}

func newSink(w http.ResponseWriter, limit int64, text func(kind, text string) any) *sink {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	s := &sink{text: text, limit: limit, w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w)}
	s.enc.SetEscapeHTML(false)
	// The headers wait like an event: a quick call (1+1) is then headers,
	// events and the end of the body in one packet; a longer one has its
	// headers on the wire within flushDelay.
	s.unflushed = true
	s.timer = time.AfterFunc(flushDelay, s.flushLater)
	return s
}

func (s *sink) flushLater() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
}

func (s *sink) flushLocked() {
	if !s.unflushed || s.failed || s.closed {
		return
	}
	s.unflushed = false
	if err := s.rc.Flush(); err != nil {
		s.failed = true
	}
}

// close flushes what is left, unless the end event is among it (see sink);
// the sink writes nothing after it.
func (s *sink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer.Stop()
	if !s.ended {
		s.flushLocked()
	}
	s.closed = true
}

// output forwards p as kind ("stdout", "stderr") events within the bound.
func (s *sink) output(kind string, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.truncated {
		s.dropped += int64(len(p))
		return
	}
	if s.limit > 0 && int64(len(p)) > s.limit-s.sent {
		cut := runeCut(p, int(s.limit-s.sent))
		s.dropped += int64(len(p) - cut)
		s.truncated = true
		p = p[:cut]
	}
	for len(p) > 0 {
		n := len(p)
		if n > maxChunk {
			n = runeCut(p, maxChunk)
			if n == 0 { // no rune start nearby: not UTF-8, cut anywhere
				n = maxChunk
			}
		}
		s.write(s.text(kind, string(p[:n])), false)
		s.sent += int64(n)
		p = p[n:]
	}
}

// event writes a non-output event, after the truncation marker if output
// was dropped since the last one.
func (s *sink) event(v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markerLocked()
	if e, ok := v.(api.ExecuteEvent); ok {
		var line []byte
		if e, line = s.boundLocked(e); line != nil {
			s.writeLine(line, false)
			return
		}
		v = e
	}
	s.write(v, isEnd(v))
}

// maxErrorText bounds an error's message (its start kept) and traceback
// (its end kept): the code chooses them, and the readers of the stream
// hold its lines whole (api.MaxExecuteLine).
const maxErrorText = 64 << 10

// boundLocked keeps e's line within what the stream's readers take: a
// result past the run's api.MaxResultBytes becomes an error saying so,
// and an error's text is cut to maxErrorText. A result within the bound
// comes back encoded, its line as write would send it, so that a chart of
// megabytes is encoded once.
func (s *sink) boundLocked(e api.ExecuteEvent) (api.ExecuteEvent, []byte) {
	if e.Error != nil && (len(e.Error.Message) > maxErrorText || len(e.Error.Traceback) > maxErrorText) {
		x := *e.Error
		x.Message = cutHead(x.Message, maxErrorText)
		x.Traceback = cutTail(x.Traceback, maxErrorText)
		e.Error = &x
	}
	if e.Type != api.EventResult || e.Result == nil {
		return e, nil
	}
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return e, nil // write meets the same error and ends the stream
	}
	n := int64(line.Len())
	if s.results+n > api.MaxResultBytes {
		return api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{Name: ErrNameResultTooLarge, Message: fmt.Sprintf(
			"result too large: %d bytes, limit %d (%s of results a run, %d left); write it to a file and download that instead",
			n, api.MaxResultBytes, sizeString(api.MaxResultBytes), api.MaxResultBytes-s.results)}}, nil
	}
	s.results += n
	return e, line.Bytes()
}

// cutHead keeps the first max bytes of t (whole runes), saying what was cut.
func cutHead(t string, max int) string {
	if len(t) <= max {
		return t
	}
	n := max
	for n > 0 && !utf8.RuneStart(t[n]) {
		n--
	}
	return fmt.Sprintf("%s\n[lizard: %d bytes cut]", t[:n], len(t)-n)
}

// cutTail keeps the last max bytes of t (whole runes), saying what was cut.
func cutTail(t string, max int) string {
	if len(t) <= max {
		return t
	}
	i := len(t) - max
	for i < len(t) && !utf8.RuneStart(t[i]) {
		i++
	}
	return fmt.Sprintf("[lizard: %d bytes cut]\n%s", i, t[i:])
}

// isEnd reports whether v is the last event of a stream.
func isEnd(v any) bool {
	switch e := v.(type) {
	case api.ExecuteEvent:
		return e.Type == api.EventEnd
	case api.ProcessEvent:
		return e.Type == "end"
	}
	return false
}

func (s *sink) markerLocked() {
	if s.dropped == 0 {
		return
	}
	msg := fmt.Sprintf("[lizard: output truncated after %s; %d bytes dropped]\n", sizeString(s.limit), s.dropped)
	s.dropped = 0
	s.write(s.text("stderr", msg), false)
}

func (s *sink) write(v any, end bool) {
	if s.failed || s.closed {
		return
	}
	if err := s.enc.Encode(v); err != nil {
		s.failed = true
		return
	}
	s.wroteLocked(end)
}

// writeLine is write of a line already encoded as s.enc would.
func (s *sink) writeLine(line []byte, end bool) {
	if s.failed || s.closed {
		return
	}
	if _, err := s.w.Write(line); err != nil {
		s.failed = true
		return
	}
	s.wroteLocked(end)
}

// wroteLocked follows a line written: the end event waits for the
// handler's return, any other for the flush timer.
func (s *sink) wroteLocked(end bool) {
	if end {
		s.timer.Stop()
		s.ended = true
		return
	}
	if !s.unflushed {
		s.unflushed = true
		s.timer.Reset(flushDelay)
	}
}

// runeCut returns the largest n <= max that does not split a UTF-8 sequence
// of p (max itself when p[max] starts a rune).
func runeCut(p []byte, max int) int {
	if max >= len(p) {
		return len(p)
	}
	if max <= 0 {
		return 0
	}
	for n := max; n > 0 && n > max-utf8.UTFMax; n-- {
		if utf8.RuneStart(p[n]) {
			return n
		}
	}
	return max
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// outWriter feeds a process's stdout or stderr into a sink. Pipe reads split
// text anywhere, so an incomplete UTF-8 sequence at the end of a read waits
// for the next one instead of turning into U+FFFD.
type outWriter struct {
	s       *sink
	kind    string
	pending []byte
	tail    *tailBuffer // keeps the end of the text for tracebacks; may be nil
}

func (o *outWriter) Write(p []byte) (int, error) {
	n := len(p)
	if o.tail != nil {
		o.tail.write(p)
	}
	data := p
	if len(o.pending) > 0 {
		data = append(o.pending, p...)
		o.pending = nil
	}
	cut := completeUTF8(data)
	o.s.output(o.kind, data[:cut])
	if cut < len(data) {
		o.pending = append([]byte(nil), data[cut:]...)
	}
	// Never report an error: the process must keep draining even when the
	// client is gone (cancellation kills it instead).
	return n, nil
}

// flush forwards whatever incomplete sequence is left at the end.
func (o *outWriter) flush() {
	if len(o.pending) > 0 {
		o.s.output(o.kind, o.pending)
		o.pending = nil
	}
}

// completeUTF8 returns the length of p without a trailing incomplete UTF-8
// sequence.
func completeUTF8(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if utf8.FullRune(p[i:]) {
				return len(p)
			}
			return i
		}
	}
	return len(p)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) write(p []byte) {
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return
	}
	if len(t.buf)+len(p) > t.max {
		drop := len(t.buf) + len(p) - t.max
		t.buf = append(t.buf[:0], t.buf[drop:]...)
	}
	t.buf = append(t.buf, p...)
}

func (t *tailBuffer) String() string {
	b := t.buf
	// Start at a rune boundary when the front was cut off.
	for i := 0; i < len(b) && i < utf8.UTFMax; i++ {
		if utf8.RuneStart(b[i]) {
			b = b[i:]
			break
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
