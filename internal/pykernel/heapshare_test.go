package pykernel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/testenv"
)

var updateHeapCode = flag.Bool("update", false, "rewrite kernel.py's HEAPSHARE_AMD64 from native/heapshare_amd64.c")

// heapCodeLine is kernel.py's line holding the machine code of
// native/heapshare_amd64.c.
var heapCodeLine = regexp.MustCompile(`(?m)^HEAPSHARE_AMD64 = "([0-9a-f]*)"$`)

// heapShareCode compiles native/heapshare_amd64.c and returns its .text, checking
// that the page kernel.py runs it from is all it needs: share first, no
// relocations, no data.
func heapShareCode(t *testing.T) []byte {
	gcc, objcopy := testenv.Tool(t, "gcc"), testenv.Tool(t, "objcopy")
	dir := t.TempDir()
	obj, bin := filepath.Join(dir, "h.o"), filepath.Join(dir, "h.bin")
	// The flags keep gcc from anything the page cannot hold: calls to
	// memset, jump tables and vector constants in .rodata, stack
	// protector and CET prologues, unwind tables.
	for _, cmd := range [][]string{
		{gcc, "-O2", "-fPIC", "-ffreestanding", "-fno-builtin", "-nostdlib", "-fno-asynchronous-unwind-tables",
			"-fno-stack-protector", "-fcf-protection=none", "-fno-jump-tables", "-fno-tree-vectorize",
			"-c", filepath.Join("native", "heapshare_amd64.c"), "-o", obj},
		{objcopy, "-O", "binary", "-j", ".text", obj, bin},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
	}
	f, err := elf.Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Type == elf.SHT_RELA || s.Type == elf.SHT_REL || (s.Flags&elf.SHF_ALLOC != 0 && s.Name != ".text" && s.Size > 0) {
			t.Fatalf("heapshare_amd64.o has section %s (%d bytes): the code must be .text alone", s.Name, s.Size)
		}
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && (s.Name != "share" || s.Value != 0) {
			t.Fatalf("function %s at %#x in .text: share must be the only one, at its start", s.Name, s.Value)
		}
	}
	code, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// TestHeapShareCode checks kernel.py runs the machine code of
// native/heapshare_amd64.c as it is.
func TestHeapShareCode(t *testing.T) {
	code := heapShareCode(t)
	m := heapCodeLine.FindSubmatchIndex(program)
	if m == nil {
		t.Fatal(`kernel.py has no line HEAPSHARE_AMD64 = "<hex>"`)
	}
	want := []byte(hex.EncodeToString(code))
	if *updateHeapCode {
		src := append(append(append([]byte(nil), program[:m[2]]...), want...), program[m[3]:]...)
		if err := os.WriteFile("kernel.py", src, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(program[m[2]:m[3]], want) {
		t.Fatalf("kernel.py's HEAPSHARE_AMD64 is not native/heapshare_amd64.c's code (%d bytes); regenerate it: go test ./internal/pykernel -run TestHeapShareCode -update", len(code))
	}
}

// preloaded starts a kernel with the template's preloads imported.
func preloaded(t *testing.T, modules ...string) *Kernel {
	t.Helper()
	k := startKernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := k.Import(ctx, modules); err != nil {
		t.Fatal(err)
	}
	return k
}

// heapRun is a share in dir: the dump, its marker, the map file.
func heapRun(dir string, timeout time.Duration) HeapShare {
	return HeapShare{Dump: filepath.Join(dir, "dump"), Ready: filepath.Join(dir, "ready"), Map: filepath.Join(dir, "heap"), Timeout: timeout}
}

// copyWhenReady is the node's side of a share: once the kernel's marker
// is there, the dump is copied to the map path under a temporary name and
// renamed, as agentclient.ShareHeap does.
func copyWhenReady(t *testing.T, s HeapShare) <-chan error {
	done := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if _, err := os.Stat(s.Ready); err == nil {
				break
			}
			if time.Now().After(deadline) {
				done <- errors.New("no ready marker")
				return
			}
			time.Sleep(time.Millisecond)
		}
		b, err := os.ReadFile(s.Dump)
		if err == nil {
			err = os.WriteFile(s.Map+".tmp", b, 0o444)
		}
		if err == nil {
			err = os.Rename(s.Map+".tmp", s.Map)
		}
		done <- err
	}()
	return done
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// heapMappings counts the kernel's mappings of path.
func heapMappings(t *testing.T, k *Kernel, path string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", k.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), " "+path+"\n")
}

// TestShareHeap shares a preloaded kernel's heap and then works it hard:
// everything it does afterwards writes private copies of the file's
// pages, and reads back what it wrote, never the file's.
func TestShareHeap(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the heap is shared on x86-64 alone")
	}
	k := preloaded(t, "numpy", "pandas", "matplotlib.pyplot")
	dir := t.TempDir()
	s := heapRun(dir, time.Minute)
	copied := copyWhenReady(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := k.ShareHeap(ctx, s)
	if err != nil {
		t.Fatalf("ShareHeap: %v", err)
	}
	if err := <-copied; err != nil {
		t.Fatal(err)
	}
	t.Logf("shared %d regions, %.1f MB of address space, %.1f MB stored, in %d ms", res.Regions, float64(res.Bytes)/1e6, float64(res.Stored)/1e6, res.Millis)
	if res.Regions < 10 || res.Bytes < 20<<20 || res.Stored < 10<<20 || res.Stored >= res.Bytes {
		t.Errorf("ShareHeap = %+v; want tens of regions and MB, some of them zero", res)
	}
	if st, err := os.Stat(s.Map); err != nil || st.Size() != res.Bytes {
		t.Errorf("map file %v, %v; want %d bytes", st, err, res.Bytes)
	}
	// Adjacent regions mapped at consecutive offsets may be one mapping.
	if n := heapMappings(t, k, s.Map); n == 0 || n > res.Regions {
		t.Errorf("the kernel maps %s %d times; want 1 to %d", s.Map, n, res.Regions)
	} else {
		t.Logf("%d mappings of the file", n)
	}
	before := fileHash(t, s.Map)
	o := run(t, k, `
import ctypes, gc, sys
import numpy, pandas
df = pandas.DataFrame({"a": range(1000), "b": [i % 7 for i in range(1000)]})
assert df.groupby("b").a.sum().loc[3] == sum(i for i in range(1000) if i % 7 == 3)
numpy.e = 3.0
numpy.lizard_attr = "x" * 100
pandas.DataFrame.__doc__ = "changed"
assert (numpy.e, numpy.lizard_attr, pandas.DataFrame.__doc__) == (3.0, "x" * 100, "changed")
for m in [m for m in sys.modules if m == "pandas" or m.startswith("pandas.")]:
    del sys.modules[m]
import pandas as pd2
assert pd2 is not pandas and pd2.DataFrame({"x": [1, 2]}).x.sum() == 3
junk = [bytearray(b"\xa5" * (i % 5000 + 1)) for i in range(20000)]
del junk
gc.unfreeze()
gc.collect()
ctypes.CDLL(None).malloc_trim(0)
for i in range(100):
    n = int(10 * 100000 ** (i / 99))
    assert not numpy.zeros(n).any(), n
for _ in range(2000):
    assert bytes(5000).count(0) == 5000
print("ok", numpy.e)
`)
	if o.stdout != "ok 3.0\n" || len(o.errors) > 0 {
		t.Fatalf("after the share: stdout %q, errors %+v", o.stdout, o.errors)
	}
	if fileHash(t, s.Map) != before {
		t.Error("the map file changed: the kernel's writes reached it")
	}
	// Once per kernel.
	_, err = k.ShareHeap(ctx, heapRun(t.TempDir(), time.Second))
	if err == nil || !strings.Contains(err.Error(), "shared already") {
		t.Errorf("a second ShareHeap = %v; want it refused", err)
	}
}

// TestShareHeapTimeout: with no map file the kernel maps nothing and
// answers an error, and goes on as before.
func TestShareHeapTimeout(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the heap is shared on x86-64 alone")
	}
	k := preloaded(t, "numpy")
	run(t, k, "import numpy; a = numpy.arange(10)")
	s := heapRun(t.TempDir(), time.Second)
	_, err := k.ShareHeap(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "nothing was mapped") {
		t.Fatalf("ShareHeap with no map file = %v; want a timeout that mapped nothing", err)
	}
	if _, err := os.Stat(s.Ready); err != nil {
		t.Errorf("no ready marker: %v", err)
	}
	// The collector is unfrozen again.
	if o := run(t, k, "import gc; print(a.sum(), numpy.ones(3).sum(), gc.get_freeze_count())"); o.stdout != "45 3.0 0\n" {
		t.Errorf("after the timeout: %q %+v", o.stdout, o.errors)
	}
	if n := heapMappings(t, k, s.Map); n != 0 {
		t.Errorf("%d mappings of the file after a timeout", n)
	}
}

// TestShareHeapRefusesThreads: a thread the code started could wake
// between the dump and the mapping.
func TestShareHeapRefusesThreads(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the heap is shared on x86-64 alone")
	}
	k := startKernel(t)
	run(t, k, "import threading; ev = threading.Event(); th = threading.Thread(target=ev.wait, name='users', daemon=True); th.start()")
	s := heapRun(t.TempDir(), time.Second)
	_, err := k.ShareHeap(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "users") {
		t.Fatalf("ShareHeap with a thread running = %v; want it refused, naming the thread", err)
	}
	if _, err := os.Stat(s.Dump); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused share left a dump: %v", err)
	}
	if o := run(t, k, "ev.set(); th.join(); print('still', th.is_alive())"); o.stdout != "still False\n" {
		t.Errorf("after the refusal: %q %+v", o.stdout, o.errors)
	}
}

// heapCopied is how much of path's mappings the kernel has copied (written):
// smaps' Private_Dirty of those mappings, in kB.
func heapCopied(t *testing.T, k *Kernel, path string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", k.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	kb, in := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			in = len(f) >= 6 && f[5] == path
		case in && len(f) == 3 && f[0] == "Private_Dirty:":
			var n int
			fmt.Sscan(f[1], &n)
			kb += n
		}
	}
	return kb
}

// TestShareHeapWarmsUp: after the share the kernel runs a first call's
// path once (warm_up in kernel.py), so the pages of the heap every first
// call writes are copied before the template's checkpoint, not by each
// sandbox's first call — and leaves no trace a caller can see: the first
// call's count is 1, and In, Out, _ and the rest read as in a kernel that
// never shared.
func TestShareHeapWarmsUp(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the heap is shared on x86-64 alone")
	}
	shared, plain := preloaded(t, "numpy", "pandas"), preloaded(t, "numpy", "pandas")
	s := heapRun(t.TempDir(), time.Minute)
	copied := copyWhenReady(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := shared.ShareHeap(ctx, s); err != nil {
		t.Fatalf("ShareHeap: %v", err)
	}
	if err := <-copied; err != nil {
		t.Fatal(err)
	}
	warmed := heapCopied(t, shared, s.Map)
	const probe = `import linecache
print(repr((In, Out, _, __, ___, _i, _ii, _iii, _i1, _1, _ih, _oh,
            sorted(k for k in globals() if k.startswith("_") and not k.startswith("__")),
            sorted(k for k in linecache.cache if k.startswith("<ipython-input")))))
print(get_ipython().execution_count)`
	var outs [2][]outcome
	first := 0
	for i, k := range []*Kernel{shared, plain} {
		for j, code := range []string{"1+1", "__import__('pandas').DataFrame({'a': [3]})", probe} {
			outs[i] = append(outs[i], run(t, k, code))
			if i == 0 && j == 0 {
				first = heapCopied(t, shared, s.Map) - warmed
			}
		}
	}
	t.Logf("the share and its warm-up copied %d kB of the heap; the first call after it %d kB", warmed, first)
	for i, o := range outs[0] {
		p := outs[1][i]
		if o.count != i+1 || o.stdout != p.stdout || o.stderr != p.stderr || len(o.errors) != 0 || !reflect.DeepEqual(o.results, p.results) {
			t.Errorf("call %d after the share: count %d, stdout %q, stderr %q, results %+v, errors %+v;\n"+
				"want count %d and as without it: stdout %q, stderr %q, results %+v",
				i+1, o.count, o.stdout, o.stderr, o.results, o.errors, i+1, p.stdout, p.stderr, p.results)
		}
	}
	if outs[0][0].stdout != "" || len(outs[0][0].results) != 1 || outs[0][0].results[0].Data != "2" {
		t.Errorf("first call: stdout %q, results %+v; want the result 2 alone", outs[0][0].stdout, outs[0][0].results)
	}
	// Without the warm-up the first call copies more of the heap than the
	// share had (here 6.6 MB, then 31 MB over the first two calls; under
	// gVisor 4.6-5.1 MiB over a first 1+1 against none).
	if first*4 > warmed {
		t.Errorf("the first call copied %d kB of the heap, the share and its warm-up %d kB; want most of it copied by the warm-up", first, warmed)
	}
}
