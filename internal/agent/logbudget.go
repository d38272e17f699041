package agent

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/lizard-build/lizard/internal/budget"
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
	return slog.New(slog.NewTextHandler(newLogBudget(w, time.Now), nil))
}

// newLogBudget writes to w within the log budget, a whole line (one
// Write) or nothing; the first line that fits after some did not says how
// many were dropped.
func newLogBudget(w io.Writer, now func() time.Time) *budget.Writer {
	return &budget.Writer{W: w, Burst: logBurst, Rate: logRate, Now: now, Note: func(lines, _ int) string {
		return fmt.Sprintf("lizard-agent: %d log lines dropped, over the agent's log budget (%d bytes a second)\n", lines, logRate)
	}}
}
