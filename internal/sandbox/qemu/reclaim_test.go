package qemu

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/hostproc"
)

// TestPrivateRanges: a squeeze pages out a QEMU's anonymous private
// mappings (TCG's code buffer, heap, stacks) and the guest's RAM (a
// restored VM's copy-on-write mapping, a booted VM's own memfd), and
// nothing QEMU maps from files, other shared memory, or the kernel's own
// mappings (which process_madvise refuses).
func TestPrivateRanges(t *testing.T) {
	maps := strings.Join([]string{
		"55d1c0000000-55d1c0200000 r--p 00000000 fe:01 1234 /usr/bin/qemu-system-x86_64",           // QEMU's file
		"55d1c2000000-55d1c3000000 rw-p 00000000 00:00 0 [heap]",                                   // in
		"7f0000000000-7f0002000000 rw-p 00000000 00:01 77 /memfd:lizard-image-ram:tpl-1 (deleted)", // in: the guest's COW pages
		"7f0010000000-7f0012000000 rw-s 00000000 00:01 78 /memfd:lizard-ram (deleted)",             // in: a booted VM's own RAM
		"7f0014000000-7f0014200000 rw-s 00000000 00:01 79 /memfd:lizard-other (deleted)",           // another memfd, shared
		"7f0018000000-7f0018200000 rw-s 00000000 00:05 80 /dev/zero (deleted)",                     // shared anonymous memory
		"7f0020000000-7f0022400000 rwxp 00000000 00:00 0 ",                                         // in: TCG's code
		"7f0030000000-7f0030001000 ---p 00000000 00:00 0 ",                                         // a guard page
		"7f0040000000-7f0040200000 r-xp 00000000 fe:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6",     // a library
		"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]",                                  // in
		"7ffd00100000-7ffd00104000 r--p 00000000 00:00 0 [vvar]",
		"7ffd00104000-7ffd00106000 r-xp 00000000 00:00 0 [vdso]",
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "maps")
	if err := os.WriteFile(path, []byte(maps), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := privateRanges(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{
		{0x55d1c2000000, 0x55d1c3000000},
		{0x7f0000000000, 0x7f0002000000},
		{0x7f0010000000, 0x7f0012000000},
		{0x7f0020000000, 0x7f0022400000},
		{0x7ffd00000000, 0x7ffd00021000},
	}
	if len(got) != len(want) {
		t.Fatalf("privateRanges = %x; want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("privateRanges[%d] = %x; want %x", i, got[i], want[i])
		}
	}
	if _, err := privateRanges(filepath.Join(t.TempDir(), "gone")); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("privateRanges of an ended process: %v; want ErrNotFound", err)
	}
}

// TestReclaim squeezes a real process standing in for a VM's QEMU (its
// pid file as a VM's): 32 MiB it wrote go to swap where the host has any,
// and the process reads them back intact; a sandbox whose process ended,
// or whose pid file names another process, is ErrNotFound.
func TestReclaim(t *testing.T) {
	if err := canPageOut(); err != nil {
		t.Fatalf("this kernel cannot page out another process's memory: %v", err)
	}
	cmd := exec.Command("python3", "-c", `import mmap, sys
m = mmap.mmap(-1, 32 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, 32 << 20, 4096):
    m[i:i + 8] = (i * 2654435761 % (1 << 64)).to_bytes(8, "little")
print("ready", flush=True)
sys.stdin.readline()
ok = all(m[i:i + 8] == (i * 2654435761 % (1 << 64)).to_bytes(8, "little") for i in range(0, 32 << 20, 4096))
print("intact" if ok else "changed", flush=True)
`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3: %v", err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("the stand-in said %q, %v", line, err)
	}
	r := &Runtime{boxDir: t.TempDir()}
	const id = "sb-reclaim"
	if err := os.MkdirAll(r.dir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	writePid := func(start string) {
		if err := os.WriteFile(r.pidPath(id), []byte(strconv.Itoa(pid)+" "+start+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writePid("1") // another process that had the number
	if err := r.Reclaim(context.Background(), id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Reclaim of a pid file naming another process: %v; want ErrNotFound", err)
	}
	writePid(hostproc.Start(pid))
	if err := r.Reclaim(context.Background(), id); err != nil {
		t.Fatalf("Reclaim: %v", err)
	}
	if sandbox.CheckSwap("/proc/swaps", "") == nil {
		u, err := r.Usage(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if u.SwapBytes < 24<<20 || u.MemoryBytes < u.SwapBytes {
			t.Errorf("after Reclaim the stand-in has %d bytes in swap of %d; want its 32 MiB there", u.SwapBytes, u.MemoryBytes)
		}
		t.Logf("squeezed: %d MiB in swap, %d MiB resident", u.SwapBytes>>20, (u.MemoryBytes-u.SwapBytes)>>20)
	} else {
		t.Log("no swap on this host: the stand-in's memory stays (process_madvise succeeds and pages out nothing anonymous)")
	}
	stdin.Write([]byte("\n"))
	if line, err := out.ReadString('\n'); line != "intact\n" {
		t.Errorf("the stand-in's memory after Reclaim: %q, %v; want intact", line, err)
	}
	cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); hostproc.Start(pid) != "" && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.Reclaim(context.Background(), id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Reclaim of an ended process: %v; want ErrNotFound", err)
	}
}

// TestCanPageOut: this kernel pages out another process's memory
// (process_madvise(MADV_PAGEOUT), Linux 5.10 or later), which CanReclaim
// asks before swap (sandbox.CheckSwap, tested in its package).
func TestCanPageOut(t *testing.T) {
	if err := canPageOut(); err != nil {
		t.Fatalf("canPageOut on Linux 5.10 or later: %v", err)
	}
}
