package qemu

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// The console's budget, the agent's log budget (internal/agent): a
// burst, then a rate, in bytes.
const (
	consoleBurst = 1 << 20
	consoleRate  = 256 // a second
)

// logConsole copies the VM's serial console from conn (QEMU's console
// socket) to the file at path within the console budget, until QEMU
// closes it. The guest's root owns the serial port and can write to it
// without end, and the file is on the host outside every disk bound of
// the sandbox: a file chardev grew by all of it. While nobody reads the
// socket (a server restarted) QEMU drops what the guest writes.
func logConsole(conn net.Conn, path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		conn.Close()
		return err
	}
	go func() {
		defer conn.Close()
		defer f.Close()
		// It ends when QEMU exits or is killed, or the file fails.
		_, _ = io.Copy(&consoleBudget{w: f, now: time.Now}, conn)
	}()
	return nil
}

// consoleBudget writes to w what fits in a bucket of consoleBurst bytes
// refilled at consoleRate bytes a second, each Write whole or not at
// all; the first that fits after some did not is preceded by a line
// saying how many bytes were dropped.
type consoleBudget struct {
	w   io.Writer
	now func() time.Time

	tokens  float64
	last    time.Time
	dropped int
}

func (b *consoleBudget) Write(p []byte) (int, error) {
	now := b.now()
	if b.last.IsZero() {
		b.tokens = consoleBurst
	} else {
		b.tokens = min(consoleBurst, b.tokens+now.Sub(b.last).Seconds()*consoleRate)
	}
	b.last = now
	var note string
	if b.dropped > 0 {
		note = fmt.Sprintf("\nlizard: %d bytes of console output dropped, over the console's budget (%d bytes a second)\n", b.dropped, consoleRate)
	}
	need := float64(len(note) + len(p))
	if need > b.tokens {
		b.dropped += len(p)
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
