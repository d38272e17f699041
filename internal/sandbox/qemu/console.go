package qemu

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/lizard-build/lizard/internal/budget"
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
		_, _ = io.Copy(newConsoleBudget(f, time.Now), conn)
	}()
	return nil
}

// newConsoleBudget writes to w within the console budget; the first
// Write that fits after some did not is preceded by a line saying how
// many bytes were dropped.
func newConsoleBudget(w io.Writer, now func() time.Time) *budget.Writer {
	return &budget.Writer{W: w, Burst: consoleBurst, Rate: consoleRate, Now: now, Note: func(_, bytes int) string {
		return fmt.Sprintf("\nlizard: %d bytes of console output dropped, over the console's budget (%d bytes a second)\n", bytes, consoleRate)
	}}
}
