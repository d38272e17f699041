package template

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// heartbeatEvery is the longest a build stays silent: a person watching a
// build of several minutes should always see that it is alive.
const heartbeatEvery = 10 * time.Second

// progress writes a build's progress lines. It is safe for concurrent use,
// since tool output, heartbeats and steps come from different goroutines.
type progress struct {
	start time.Time

	mu   sync.Mutex
	w    io.Writer
	last time.Time // time of the last line written
	step string    // "[2/5]" of the running step, for heartbeats
}

func newProgress(w io.Writer) *progress {
	if w == nil {
		w = io.Discard
	}
	now := time.Now()
	return &progress{w: w, start: now, last: now}
}

func (p *progress) elapsed() int { return int(time.Since(p.start).Seconds()) }

// Printf writes one line. Write errors are ignored: progress is best effort.
func (p *progress) Printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeLocked(fmt.Sprintf(format, args...))
}

func (p *progress) writeLocked(line string) {
	p.last = time.Now()
	io.WriteString(p.w, line+"\n")
}

// Step announces step n of total, with the time elapsed since the build began.
func (p *progress) Step(n, total int, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.step = fmt.Sprintf("[%d/%d]", n, total)
	p.writeLocked(fmt.Sprintf("%s %s (%ds elapsed)", p.step, name, p.elapsed()))
}

// heartbeat writes "still working" whenever nothing was written for
// heartbeatEvery, until stop is called.
func (p *progress) heartbeat() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				p.mu.Lock()
				if now.Sub(p.last) >= heartbeatEvery {
					p.writeLocked(fmt.Sprintf("%s still working... %ds", p.step, p.elapsed()))
				}
				p.mu.Unlock()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// lineWriter forwards a tool's output to progress line by line, prefixed with
// the tool's name, and keeps the last lines for the error message if the tool
// fails. A command's stdout and stderr each get one (see split), sharing the
// tail, so that their partial lines do not run together.
type lineWriter struct {
	p      *progress
	prefix string
	tail   *outputTail

	mu      sync.Mutex
	partial []byte
}

// outputTail is the last lines of a command's output.
type outputTail struct {
	mu    sync.Mutex
	lines []string
}

const tailLines = 15

func (p *progress) lineWriter(prefix string) *lineWriter {
	return &lineWriter{p: p, prefix: prefix, tail: &outputTail{}}
}

// split returns a writer for another stream of the same command.
func (w *lineWriter) split() *lineWriter {
	return &lineWriter{p: w.p, prefix: w.prefix, tail: w.tail}
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, b...)
	for {
		// pip and debootstrap redraw with \r; treat it as a line end.
		i := bytes.IndexAny(w.partial, "\r\n")
		if i < 0 {
			break
		}
		w.emit(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return len(b), nil
}

// Flush emits an unterminated last line.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.emit(string(w.partial))
		w.partial = nil
	}
}

func (w *lineWriter) emit(line string) {
	line = strings.TrimRight(line, " \t")
	if line == "" {
		return
	}
	w.p.Printf("  %s: %s", w.prefix, line)
	t := w.tail
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

// Tail returns the last lines written, for error messages.
func (w *lineWriter) Tail() string {
	w.tail.mu.Lock()
	defer w.tail.mu.Unlock()
	return strings.Join(w.tail.lines, "\n")
}
