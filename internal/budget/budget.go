// Package budget bounds what a sandbox can make the host write to a file
// outside every disk bound of the sandbox (the agent's log, a VM's serial
// console): a burst of bytes, then a rate.
package budget

import (
	"io"
	"sync"
	"time"
)

// Writer writes to W what fits in a bucket of Burst bytes refilled at Rate
// bytes a second, each Write whole or not at all. The first Write that
// fits after some did not is preceded by Note's line, given how many
// writes and bytes were dropped.
type Writer struct {
	W     io.Writer
	Burst int
	Rate  int // bytes a second
	Now   func() time.Time
	Note  func(writes, bytes int) string

	mu            sync.Mutex
	tokens        float64
	last          time.Time
	writes, bytes int // dropped since the last note
}

func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.Now()
	if b.last.IsZero() {
		b.tokens = float64(b.Burst)
	} else {
		b.tokens = min(float64(b.Burst), b.tokens+now.Sub(b.last).Seconds()*float64(b.Rate))
	}
	b.last = now
	var note string
	if b.writes > 0 {
		note = b.Note(b.writes, b.bytes)
	}
	need := float64(len(note) + len(p))
	if need > b.tokens {
		b.writes++
		b.bytes += len(p)
		return len(p), nil
	}
	b.tokens -= need
	if note != "" {
		b.writes, b.bytes = 0, 0
		if _, err := io.WriteString(b.W, note); err != nil {
			return 0, err
		}
	}
	return b.W.Write(p)
}
