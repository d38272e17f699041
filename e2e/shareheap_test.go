package e2e

import (
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestShareHeap: with --share-heap the template snapshot's kernel maps its
// preloaded heap from a file that every sandbox restored from it maps too,
// read-only, copying only the pages it writes. Adversarially: one sandbox
// mutating the preloaded modules (a module's attribute, a class's
// docstring, every pandas module deleted and imported again, freed
// allocations trimmed, calloc's zeros) sees its own writes and the right
// values, while another, and one restored after, see the originals; its
// code cannot write the file, not even as root through sudo; its pause and
// resume keep its writes, and its fork sees them; admin check --repair
// keeps the heap the images name. One server, five sandboxes.
func TestShareHeap(t *testing.T) {
	s := startServer(t, "--share-heap")
	c := s.createProject("proj_heap")
	ctx := context.Background()
	s.waitLog(t, 1, "template heap shared")
	s.waitLog(t, 1, "template snapshot made")
	t.Logf("template heap shared: %s regions, %s bytes, %s stored", logField(t, s.logs(), "regions", "template heap shared"),
		logField(t, s.logs(), "bytes", "template heap shared"), logField(t, s.logs(), "stored", "template heap shared"))
	if n, _ := strconv.Atoi(logField(t, s.logs(), "regions", "template heap shared")); n < 50 {
		t.Errorf("the template's kernel shared %d regions; want its preloads' heap (over 50)", n)
	}
	kept, _ := filepath.Glob(filepath.Join(s.dataDir, "gvisor", "files", "heap-*", api.HeapFile))
	if len(kept) != 1 {
		t.Fatalf("kept heaps: %v; want the template's one", kept)
	}
	sum := func() [32]byte {
		b, err := os.ReadFile(kept[0])
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	before := sum()

	a := newSandbox(t, c, api.CreateSandboxRequest{})
	b := newSandbox(t, c, api.CreateSandboxRequest{})
	for _, id := range []string{a.SandboxID, b.SandboxID} {
		s.waitLog(t, 1, "sandbox restored", id, "/templates/interpreter-")
	}
	// The template's kernel ran a first call's path after the share
	// (kernel.py's warm_up) and undid it: a restored sandbox's first call is
	// its first, as without --share-heap — count 1, nothing but its own
	// output, In/Out/_ and the cache of cells as if nothing ran before.
	first := func(code string) *client.Execution {
		t.Helper()
		x, err := c.Execute(ctx, a.SandboxID, api.ExecuteRequest{Code: code}, nil)
		if err != nil {
			t.Fatalf("execute %q: %v", code, err)
		}
		return x
	}
	if x := first("1+1"); x.ExecutionCount != 1 || x.Stdout != "" || x.Stderr != "" || x.Error != nil ||
		len(x.Results) != 1 || x.Results[0].Data != "2" {
		t.Errorf("a restored sandbox's first call 1+1: count %d, stdout %q, stderr %q, error %+v, results %+v; "+
			"want count 1 and the result 2 alone", x.ExecutionCount, x.Stdout, x.Stderr, x.Error, x.Results)
	}
	const probe = `import linecache
print(In[:2], Out, _, repr(__), repr(_i), repr(_ii), _1, sorted(k for k in globals() if k[:2] == '_i' and k[2:].isdigit()),
      len([k for k in linecache.cache if k.startswith('<ipython-input')]))`
	if x := first(probe); x.ExecutionCount != 2 || x.Stdout != "['', '1+1'] {1: 2} 2 '' '1+1' '' 2 ['_i1', '_i2'] 2\n" || x.Stderr != "" {
		t.Errorf("the second call: count %d, stdout %q, stderr %q, error %+v; want count 2 and only the first call before it",
			x.ExecutionCount, x.Stdout, x.Stderr, x.Error)
	}

	// The kernel's heap is mapped from the file in a restored sandbox.
	maps := "print(sum(1 for l in open('/proc/self/maps') if l.rstrip().endswith('" + api.HeapMount + "/" + api.HeapFile + "')))"
	n, _ := strconv.Atoi(strings.TrimSpace(runPy(t, c, a.SandboxID, maps)))
	t.Logf("the restored kernel maps %d regions from %s/%s", n, api.HeapMount, api.HeapFile)
	if n < 50 {
		t.Errorf("the restored kernel maps %d regions from the heap file; want its preloads' heap", n)
	}

	// What a sandbox sees of the preloaded modules.
	const look = `import math, sys, numpy, pandas
print(numpy.e == math.e, getattr(pandas, 'lizard_mark', None), pandas.DataFrame.__doc__ == 'A doc', int(pandas.DataFrame({'a': [1, 2, 3]}).a.sum()))`
	const original, mutated = "True None False 6", "False A True 6"
	see := func(id, who, want string) {
		t.Helper()
		if got := strings.TrimSpace(runPy(t, c, id, look)); got != want {
			t.Errorf("%s sees %q; want %q", who, got, want)
		}
	}
	see(b.SandboxID, "B, before A's writes", original)

	mutate := `import ctypes, gc, sys, numpy, pandas
numpy.e = 3
setattr(pandas, 'lizard_mark', 'before the re-import')
for m in [k for k in sys.modules if k == 'pandas' or k.startswith('pandas.')]:
    del sys.modules[m]
import pandas
pandas.lizard_mark = 'A'
pandas.DataFrame.__doc__ = 'A doc'
junk = [bytes(1000) for _ in range(20000)]
del junk
gc.unfreeze()
gc.collect()
ctypes.CDLL('libc.so.6').malloc_trim(0)
zeros = all(not numpy.zeros(n, dtype=numpy.uint8).any() for n in (10, 1000, 10**5, 10**6, 10**7, 10**8))
fresh = all(x == bytes(5000) for x in [bytes(5000) for _ in range(2000)])
print(numpy.e, int(pandas.DataFrame({'a': [1, 2, 3]}).a.sum()), zeros, fresh)`
	if got := strings.TrimSpace(runPy(t, c, a.SandboxID, mutate)); got != "3 6 True True" {
		t.Fatalf("A's writes into the shared heap: %q; want \"3 6 True True\" (its values, a working pandas, calloc's zeros)", got)
	}
	see(a.SandboxID, "A, after its writes", mutated)
	see(b.SandboxID, "B, after A's writes", original)
	later := newSandbox(t, c, api.CreateSandboxRequest{})
	see(later.SandboxID, "a sandbox restored after A's writes", original)

	// The file is read-only to the sandbox's code and to its root.
	write := `import os
for op in (lambda: open('` + api.HeapMount + "/" + api.HeapFile + `', 'r+b').write(b'x'), lambda: open('` + api.HeapMount + `/new', 'w')):
    try:
        op()
        print('written')
    except OSError as e:
        print(type(e).__name__)`
	if got := strings.Fields(runPy(t, c, a.SandboxID, write)); len(got) != 2 || got[0] == "written" || got[1] == "written" {
		t.Errorf("A's code writing the heap's file and directory: %q; want both refused", got)
	}
	root := "sudo sh -c 'echo x > " + api.HeapMount + "/" + api.HeapFile + "; touch " + api.HeapMount + "/new' 2>&1; echo rc=$?"
	if got := run(t, c, a.SandboxID, "bash", root).Stdout; strings.Count(got, "Read-only file system") != 2 || strings.Contains(got, "rc=0") {
		t.Errorf("A's root writing the heap's file and directory: %q; want both refused, read-only", got)
	}
	if sum() != before {
		t.Errorf("the kept heap %s changed after A's writes", kept[0])
	}

	// Pause and resume keep A's writes (its image names the heap); its
	// fork sees them.
	if _, err := c.PauseSandbox(ctx, a.SandboxID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := c.ResumeSandbox(ctx, a.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatalf("resume: %v", err)
	}
	see(a.SandboxID, "A, resumed", mutated)
	forks, err := c.Fork(ctx, a.SandboxID, api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), forks[0].SandboxID) })
	see(forks[0].SandboxID, "A's fork", mutated)
	see(a.SandboxID, "A, after its fork", mutated)

	// admin check --repair keeps the heap the images name, and removes
	// one nothing names.
	stray := filepath.Join(s.dataDir, "gvisor", "files", "heap-0123456789abcdef")
	if err := os.MkdirAll(stray, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stray, api.HeapFile), []byte("old"), 0o444); err != nil {
		t.Fatal(err)
	}
	s.stop()
	if out, err := exec.Command(s.bin, "admin", "check", "--data-dir", s.dataDir, "--repair").CombinedOutput(); err != nil {
		t.Logf("admin check --repair: %v\n%s", err, out)
	}
	if _, err := os.Stat(kept[0]); err != nil {
		t.Errorf("admin check --repair removed the heap the template's image names: %v", err)
	}
	if _, err := os.Stat(stray); err == nil {
		t.Errorf("%s, which nothing names, is still there after admin check --repair", stray)
	}
}
