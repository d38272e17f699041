package qemu

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
)

func TestConsoleBudget(t *testing.T) {
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for _, tc := range []struct {
		name   string
		writes int           // chunks written at once
		wait   time.Duration // then, before one more
		want   int           // bytes of chunks in the log
		note   string        // in the log
	}{
		{name: "within the burst", writes: 16, want: 16 << 16},
		{name: "over the burst, dropped", writes: 40, want: 16 << 16},
		{name: "the rate refills", writes: 40, wait: 300 * time.Second, want: 17 << 16,
			note: "lizard: 1572864 bytes of console output dropped, over the console's budget (256 bytes a second)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			now := time.Unix(1, 0)
			b := newConsoleBudget(&out, func() time.Time { return now })
			for range tc.writes {
				if n, err := b.Write(chunk); n != len(chunk) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if tc.wait > 0 {
				now = now.Add(tc.wait)
				b.Write(chunk)
			}
			if got := bytes.Count(out.Bytes(), []byte("x")); got != tc.want {
				t.Errorf("log holds %d bytes of output, want %d", got, tc.want)
			}
			if tc.note != "" && !strings.Contains(out.String(), tc.note) {
				t.Errorf("log lacks %q", tc.note)
			}
		})
	}
}

// TestConsoleBounded: the guest's root writing to the serial port without
// end leaves the console log on the host within its budget.
func TestConsoleBounded(t *testing.T) {
	r := newTestRuntime(t, t.TempDir())
	sandboxtest.NetworkOctet = 248
	spec := sandboxtest.Spec(sandboxtest.BuildRootFS(t))
	ctx := context.Background()
	t.Cleanup(func() { r.Kill(ctx, spec.ID) })
	if err := r.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitReady(spec.Network, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	sandboxtest.RequestTimeout = 2 * time.Minute
	line := []byte("lizard console flood 0123456789abcdef0123456789abcdef\n")
	flood := bytes.Repeat(line, (1<<20)/len(line))
	for i := range 2 {
		if _, err := sandboxtest.Do(spec.Network, "PUT", "/file?path=/dev/ttyS0", flood); err != nil {
			t.Fatalf("writing MiB %d to the serial port: %v", i, err)
		}
	}
	b, err := os.ReadFile(r.consolePath(spec.ID))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > consoleBurst+64<<10 {
		t.Errorf("console log is %d bytes after 2 MiB written to the serial port, want at most the budget's %d and a margin", len(b), consoleBurst)
	}
	if !bytes.Contains(b, line[:len(line)-1]) {
		t.Errorf("console log lacks the guest's output: %q", tail(r.consolePath(spec.ID)))
	}

	// With nobody reading (a server restarting) QEMU drops what the guest
	// writes: the guest is neither blocked nor stopped.
	unread := false
	for fd := range 1024 {
		if sa, err := syscall.Getpeername(fd); err == nil {
			if u, ok := sa.(*syscall.SockaddrUnix); ok && u.Name == r.consoleSock(spec.ID) {
				unread = syscall.Shutdown(fd, syscall.SHUT_RDWR) == nil
			}
		}
	}
	if !unread {
		t.Fatal("found no connection to the VM's console socket")
	}
	time.Sleep(time.Second) // the copy sees its end
	before, _ := os.Stat(r.consolePath(spec.ID))
	sandboxtest.RequestTimeout = 30 * time.Second
	if _, err := sandboxtest.Do(spec.Network, "PUT", "/file?path=/dev/ttyS0", flood); err != nil {
		t.Fatalf("writing to the serial port nobody reads: %v", err)
	}
	after, _ := os.Stat(r.consolePath(spec.ID))
	if after.Size() != before.Size() {
		t.Errorf("console log grew from %d to %d bytes with nobody reading the console", before.Size(), after.Size())
	}
}
