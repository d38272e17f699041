package agent

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// The agent's log budget: a burst, then a rate, in bytes.
const (
	logBurst = 1 << 20
	logRate  = 256 // a second
)

// NewLogger is the agent's logger, writing text lines to w within the
// log budget. The agent's stderr is a file on the host (the sandbox's
// console log), which no disk bound of the sandbox covers, and code
// inside the sandbox can make the agent log: every request it sends its
// own agent is refused with a line naming the path, and Go's server logs
// one for each request with a ';' in its query. Unbounded, a loop of
// such requests wrote 22 MB a second to the host's disk.
func NewLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(&logBudget{w: w, now: time.Now}, nil))
}

// logBudget writes to w what fits in a bucket of logBurst bytes refilled
// at logRate bytes a second, a whole line (one Write) or nothing; the
// first line that fits after some did not says how many were dropped.
type logBudget struct {
	w   io.Writer
	now func() time.Time

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int
}

func (b *logBudget) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.last.IsZero() {
		b.tokens = logBurst
	} else {
		b.tokens = min(logBurst, b.tokens+now.Sub(b.last).Seconds()*logRate)
	}
	b.last = now
	var note string
	if b.dropped > 0 {
		note = fmt.Sprintf("lizard-agent: %d log lines dropped, over the agent's log budget (%d bytes a second)\n", b.dropped, logRate)
	}
	need := float64(len(note) + len(p))
	if need > b.tokens {
		b.dropped++
		return len(p), nil
	}
	b.tokens -= need
	if note != "" {
		b.dropped = 0
		if _, err := io.WriteString(b.w, note); err != nil {
			return 0, err
		}
	}
	return b.w.Write(p)
}
