package agent

import (
	"sort"
	"sync"
)

// outputLogBytes is how much recent output a background process keeps for
// readers that attach late or fall behind (docs/processes.md).
const outputLogBytes = 1 << 20

// outChunk is one read of a process's output.
type outChunk struct {
	off  int64  // offset of data[0] in everything the process wrote
	kind string // stdout, stderr or pty
	data []byte // never changed once logged: readers share it
}

// outputLog keeps the last max bytes of a process's output and lets any
// number of readers follow it, each at its own offset. The process's side
// never waits for a reader: a reader that falls more than max bytes behind
// learns how much it lost (read's dropped) and goes on from the oldest byte
// kept. So memory is bounded by max (plus one read per reader in flight)
// however slow or many the readers are, and a flood cannot stall the
// process or its other readers.
type outputLog struct {
	max int

	mu      sync.Mutex
	chunks  []outChunk // oldest first; chunks[0].off == start
	start   int64      // offset of the oldest byte kept
	end     int64      // offset just past the newest byte
	size    int        // bytes kept (end - start)
	done    bool       // the process ended: nothing more will be logged
	changed chan struct{}
}

func newOutputLog(max int) *outputLog {
	return &outputLog{max: max, changed: make(chan struct{})}
}

// write logs a copy of p.
func (l *outputLog) write(kind string, p []byte) {
	if len(p) == 0 {
		return
	}
	data := append([]byte(nil), p...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.chunks = append(l.chunks, outChunk{off: l.end, kind: kind, data: data})
	l.end += int64(len(data))
	l.size += len(data)
	for l.size > l.max && len(l.chunks) > 1 {
		c := l.chunks[0]
		l.chunks[0] = outChunk{} // let the collector have its data
		l.chunks = l.chunks[1:]
		l.size -= len(c.data)
		l.start += int64(len(c.data))
	}
	l.wakeLocked()
}

// finish marks the end of the output.
func (l *outputLog) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
	l.wakeLocked()
}

func (l *outputLog) wakeLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// read returns the logged chunks from offset off on, at most about limit
// bytes of them (always at least one chunk when there is one); dropped is
// how many bytes from off on the log no longer has; next is the offset to
// read from next. done means the output ended and next is its end; else
// wait is closed when there is more.
func (l *outputLog) read(off int64, limit int) (chunks []outChunk, dropped, next int64, done bool, wait <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off < l.start {
		dropped = l.start - off
		off = l.start
	}
	i := sort.Search(len(l.chunks), func(i int) bool { return l.chunks[i].off >= off })
	n := 0
	for ; i < len(l.chunks) && (n == 0 || n+len(l.chunks[i].data) <= limit); i++ {
		chunks = append(chunks, l.chunks[i])
		n += len(l.chunks[i].data)
	}
	next = off + int64(n)
	return chunks, dropped, next, l.done && next == l.end, l.changed
}

// bytes reports how much output is kept, for tests of the bound.
func (l *outputLog) bytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// textWriter logs a process's stdout or stderr, holding back an incomplete
// UTF-8 sequence at the end of a pipe read until the next one, so that
// every chunk turns into text without U+FFFD at a read boundary.
type textWriter struct {
	log     *outputLog
	kind    string
	pending []byte
}

func (t *textWriter) Write(p []byte) (int, error) {
	n := len(p)
	data := p
	if len(t.pending) > 0 {
		data = append(t.pending, p...)
		t.pending = nil
	}
	cut := completeUTF8(data)
	t.log.write(t.kind, data[:cut])
	if cut < len(data) {
		t.pending = append([]byte(nil), data[cut:]...)
	}
	return n, nil
}

func (t *textWriter) flush() {
	t.log.write(t.kind, t.pending)
	t.pending = nil
}
