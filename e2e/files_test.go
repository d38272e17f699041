package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestFilesWatchRenameInfo: a watch sees what code in the sandbox does to
// files, within a bound; rename and stat through the API.
func TestFilesWatchRenameInfo(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_files")
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := sb.SandboxID

	if _, err := c.MakeDir(ctx, id, "w"); err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchDir(ctx, id, "w", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	events := make(chan api.FileEvent, 256)
	ended := make(chan error, 1)
	go func() {
		for {
			ev, err := w.Next()
			if err != nil {
				ended <- err
				return
			}
			events <- ev
		}
	}()
	// The events each step makes, in order (others may come between).
	const bound = 2 * time.Second
	for _, step := range []struct {
		cmd  string
		want []string
	}{
		{"echo hi > w/a.txt", []string{"create a.txt", "write a.txt"}},
		{"chmod 600 w/a.txt", []string{"chmod a.txt"}},
		{"mv w/a.txt w/b.txt", []string{"rename a.txt", "create b.txt"}},
		{"mkdir -p w/d/e && echo x > w/d/e/f", []string{"create d", "create d/e/f"}},
		{"echo more >> w/d/e/f", []string{"write d/e/f"}},
		{"rm w/b.txt", []string{"remove b.txt"}},
	} {
		start := time.Now()
		execOK(t, c, id, "bash", "-c", "cd ~ && "+step.cmd)
		want := step.want
		var seen []string
		deadline := time.After(bound)
		for len(want) > 0 {
			select {
			case ev := <-events:
				seen = append(seen, ev.Type+" "+ev.Name)
				if ev.Type+" "+ev.Name == want[0] {
					want = want[1:]
				}
			case err := <-ended:
				t.Fatalf("%s: the watch ended (%v); saw %v, want %v", step.cmd, err, seen, want)
			case <-deadline:
				t.Fatalf("%s: %v after its exec returned saw %v, still want %v", step.cmd, bound, seen, want)
			}
		}
		t.Logf("%s: events within %v of the exec's start", step.cmd, time.Since(start).Round(time.Millisecond))
	}

	// Rename and get_info through the API, a symlink among them.
	execOK(t, c, id, "bash", "-c", "cd ~ && echo 12345 > r.txt && chmod 640 r.txt && ln -s r2.txt link")
	info, err := c.Rename(ctx, id, "r.txt", "r2.txt")
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != "/home/user/r2.txt" || info.Size != 6 || info.Owner != "user" || info.Group != "user" || info.Permissions != "-rw-r-----" {
		t.Errorf("Rename answered %+v, want /home/user/r2.txt, 6 bytes, user:user, -rw-r-----", info)
	}
	info, err = c.Stat(ctx, id, "link")
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != "symlink" || info.SymlinkTarget != "r2.txt" || info.Permissions[0] != 'l' {
		t.Errorf("Stat link = %+v, want a symlink to r2.txt", info)
	}
	if _, err := c.Rename(ctx, id, "nothing", "x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Rename of a missing file: %v, want ErrNotFound", err)
	}
	if _, err := c.WatchDir(ctx, id, "nothing", false); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("WatchDir of a missing directory: %v, want ErrNotFound", err)
	}
	if _, err := c.WatchDir(ctx, id, "r2.txt", false); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("WatchDir of a file: %v, want ErrInvalidArgument saying it is not a directory", err)
	}

	// A pause ends the watch (409) instead of waiting for it: a watch
	// never ends by itself.
	paused := time.Now()
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatalf("pausing with a watch open: %v", err)
	}
	if d := time.Since(paused); d > 8*time.Second {
		t.Errorf("the pause with a watch open took %v", d)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "paused") {
			t.Errorf("the watch of a paused sandbox ended with %v, want ErrConflict saying it was paused", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch was still open 5 s after its sandbox was paused")
	}
	// Watching again resumes the sandbox, as any call does.
	w2, err := c.WatchDir(ctx, id, "w", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	go func() {
		for {
			if _, err := w2.Next(); err != nil {
				ended <- err
				return
			}
		}
	}()

	// The sandbox's end ends the watch with the typed gone error, at once.
	killed := time.Now()
	if err := c.KillSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, client.ErrGone) {
			t.Errorf("the watch of a killed sandbox ended with %v, want ErrGone", err)
		}
		if d := time.Since(killed); d > 2*time.Second {
			t.Errorf("the watch ended %v after the kill, want within 2 s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch was still open 5 s after its sandbox was killed")
	}
}

// rssOf is the resident memory of host process pid, in bytes.
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// peakSampler records the largest of a measure taken every 50 ms.
type peakSampler struct {
	mu   sync.Mutex
	peak int64
	stop chan struct{}
	done chan struct{}
}

func samplePeak(measure func() int64) *peakSampler {
	p := &peakSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			v := measure()
			p.mu.Lock()
			p.peak = max(p.peak, v)
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return p
}

func (p *peakSampler) end() int64 {
	close(p.stop)
	<-p.done
	return p.peak
}

// TestFilesLargeStreamed moves a 2 GiB file up and down through the Go
// client while watching the resident memory of the server, the agent and
// this process (the client): none may hold more than a few MiB of it.
func TestFilesLargeStreamed(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_bigfiles")
	disk := int64(3072)
	sb := newSandbox(t, c, api.CreateSandboxRequest{DiskMb: &disk})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	id := sb.SandboxID
	const size = 2 << 30
	const bound = 24 << 20

	// The agent's resident memory, as the sandbox's kernel counts it,
	// printed every 100 ms by a loop in the sandbox for the whole transfer.
	agentDone := make(chan struct{})
	var agentRSS []int64
	loopCtx, stopLoop := context.WithCancel(ctx)
	go func() {
		defer close(agentDone)
		var buf bytes.Buffer
		_, _ = c.Exec(loopCtx, id, api.ProcessRequest{Cmd: "while :; do grep VmRSS /proc/1/status; sleep 0.1; done"}, func(ev api.ProcessEvent) {
			buf.WriteString(ev.Text)
			for {
				line, err := buf.ReadString('\n')
				if err != nil {
					buf.WriteString(line)
					return
				}
				f := strings.Fields(line)
				if len(f) >= 2 {
					kb, _ := strconv.ParseInt(f[1], 10, 64)
					agentRSS = append(agentRSS, kb<<10)
				}
			}
		})
	}()
	time.Sleep(500 * time.Millisecond)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	clientBase := int64(ms.HeapInuse)
	serverBase := rssOf(s.cmd.Process.Pid)
	server := samplePeak(func() int64 { return rssOf(s.cmd.Process.Pid) })
	clientHeap := samplePeak(func() int64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapInuse)
	})

	up := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{1}), size), up)
	start := time.Now()
	info, err := c.WriteFile(ctx, id, "big.bin", src)
	if err != nil {
		t.Fatal(err)
	}
	upTook := time.Since(start)
	if info.Size != size {
		t.Fatalf("WriteFile wrote %d bytes, want %d", info.Size, size)
	}
	start = time.Now()
	rc, err := c.ReadFile(ctx, id, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	down := sha256.New()
	n, err := io.Copy(down, bufio.NewReaderSize(rc, 64<<10))
	rc.Close()
	downTook := time.Since(start)
	serverPeak, clientPeak := server.end(), clientHeap.end()
	stopLoop()
	<-agentDone
	if err != nil || n != size {
		t.Fatalf("ReadFile gave %d bytes (%v), want %d", n, err, size)
	}
	if !bytes.Equal(up.Sum(nil), down.Sum(nil)) {
		t.Fatal("the file read back differs from the one written")
	}
	mbps := func(d time.Duration) float64 { return float64(size) / d.Seconds() / 1e6 }
	t.Logf("2 GiB up in %v (%.0f MB/s), down in %v (%.0f MB/s)", upTook.Round(time.Millisecond), mbps(upTook), downTook.Round(time.Millisecond), mbps(downTook))

	if len(agentRSS) < 10 {
		t.Fatalf("only %d samples of the agent's memory", len(agentRSS))
	}
	agentBase, agentPeak := agentRSS[0], agentRSS[0]
	for _, v := range agentRSS {
		agentPeak = max(agentPeak, v)
	}
	for _, m := range []struct {
		who        string
		base, peak int64
	}{
		{"server (RSS)", serverBase, serverPeak},
		{"agent (RSS)", agentBase, agentPeak},
		{"client (Go heap)", clientBase, clientPeak},
	} {
		t.Logf("%s: %.1f MiB before, %.1f MiB at most during", m.who, float64(m.base)/(1<<20), float64(m.peak)/(1<<20))
		if m.peak-m.base > bound {
			t.Errorf("%s grew by %d MiB moving a 2 GiB file, want at most %d MiB", m.who, (m.peak-m.base)>>20, bound>>20)
		}
	}
}

// TestFilesLimits: an upload past the server's --max-file-mb and one past
// the sandbox's disk are refused with words, and leave nothing behind.
func TestFilesLimits(t *testing.T) {
	s := startServer(t, "--max-file-mb", "8")
	c := s.createProject("proj_filelimits")
	disk := int64(32)
	sb := newSandbox(t, c, api.CreateSandboxRequest{DiskMb: &disk})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := sb.SandboxID

	// Streamed (no length): cut where it passes the bound.
	_, err := c.WriteFile(ctx, id, "over.bin", io.LimitReader(rand.NewChaCha8([32]byte{}), 9<<20))
	if !errors.Is(err, client.ErrTooLarge) || !strings.Contains(err.Error(), "--max-file-mb") {
		t.Errorf("a streamed 9 MiB upload past --max-file-mb 8: %v, want ErrTooLarge naming the flag", err)
	}
	// With a length: refused before a byte is sent on.
	_, err = c.WriteFile(ctx, id, "over.bin", bytes.NewReader(make([]byte, 9<<20)))
	if !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("a 9 MiB upload with its length: %v, want ErrTooLarge", err)
	}
	// At the bound: fine.
	if _, err := c.WriteFile(ctx, id, "at.bin", io.LimitReader(rand.NewChaCha8([32]byte{}), 8<<20)); err != nil {
		t.Errorf("an upload of exactly --max-file-mb: %v", err)
	}
	// Past the sandbox's 32 MiB disk, in pieces under the file bound.
	for i := range 5 {
		_, err = c.WriteFile(ctx, id, fmt.Sprintf("fill%d.bin", i), io.LimitReader(rand.NewChaCha8([32]byte{}), 8<<20))
		if err != nil {
			break
		}
	}
	if !errors.Is(err, client.ErrTooLarge) || !strings.Contains(err.Error(), "disk is full") {
		t.Errorf("filling a 32 MiB disk: %v, want ErrTooLarge saying the disk is full", err)
	}
	out := execOK(t, c, id, "bash", "-c", "ls -a ~")
	if strings.Contains(out, ".lizard-upload") || strings.Contains(out, "over.bin") {
		t.Errorf("refused uploads left files behind: %s", out)
	}
	// The API stays usable.
	if _, err := c.Stat(ctx, id, "at.bin"); err != nil {
		t.Errorf("stat after the refusals: %v", err)
	}
}

// TestFilesActAsUser: file calls act as the user they name — the sandbox
// user by default, root only when asked — in a real sandbox, where gVisor
// keeps each thread's credentials apart (issue 33: the agent, root, wrote
// /etc for any caller and gave the file to the sandbox user, a way to root
// inside). Each file operation as the default user where only root may is
// a 400 saying permission was denied, leaving nothing behind; as root it
// works; and after many calls as the user in parallel, calls as root in
// parallel all work (no thread kept the user's credentials).
func TestFilesActAsUser(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_filesuser")
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := sb.SandboxID
	root := client.AsUser("root")
	// A directory only root may read, as /root often is.
	p, err := c.StartProcess(ctx, id, api.ProcessStartRequest{Cmd: "mkdir -m 700 /srv/private && echo s > /srv/private/secret", User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.WaitProcess(ctx, id, p.Pid); err != nil || info.ExitCode == nil || *info.ExitCode != 0 {
		t.Fatalf("making /srv/private as root: %+v, %v", info, err)
	}
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), `"root"`) {
			t.Errorf("%s as the sandbox user: %v; want 400 saying permission denied and how to ask for root", what, err)
		}
	}
	_, err = c.WriteFile(ctx, id, "/etc/x", strings.NewReader("owned"))
	denied("write /etc/x", err)
	_, err = c.WriteFile(ctx, id, "/etc/hostname", strings.NewReader("owned"))
	denied("write over /etc/hostname", err)
	_, err = c.WriteFile(ctx, id, "/etc/lizard-new/x", strings.NewReader("owned"))
	denied("write /etc/lizard-new/x", err)
	_, err = c.ReadFile(ctx, id, "/srv/private/secret")
	denied("read /srv/private/secret", err)
	_, err = c.ListDir(ctx, id, "/srv/private")
	denied("list /srv/private", err)
	_, err = c.Stat(ctx, id, "/srv/private/secret")
	denied("stat /srv/private/secret", err)
	_, err = c.MakeDir(ctx, id, "/opt/made")
	denied("mkdir /opt/made", err)
	denied("remove /etc/hostname", c.Remove(ctx, id, "/etc/hostname"))
	_, err = c.Rename(ctx, id, "/etc/hostname", "/home/user/hostname")
	denied("rename /etc/hostname", err)
	_, err = c.WatchDir(ctx, id, "/srv/private", false)
	denied("watch /srv/private", err)
	if got := execOK(t, c, id, "bash", "-c", "ls -a /etc /opt | grep -c -e lizard-upload -e lizard-new -e '^x$' -e made; true"); strings.TrimSpace(got) != "0" {
		t.Errorf("refused calls left %s entries in /etc or /opt", got)
	}

	if _, err := c.WriteFile(ctx, id, "/etc/x", strings.NewReader("root's"), root); err != nil {
		t.Fatalf("write /etc/x as root: %v", err)
	}
	if info, err := c.Stat(ctx, id, "/etc/x", root); err != nil || info.Owner != "root" {
		t.Errorf("/etc/x written as root: %+v, %v; want owned by root", info, err)
	}
	if rc, err := c.ReadFile(ctx, id, "/srv/private/secret", root); err != nil {
		t.Errorf("read /srv/private/secret as root: %v", err)
	} else {
		rc.Close()
	}
	if _, err := c.ListDir(ctx, id, "/srv/private", root); err != nil {
		t.Errorf("list /srv/private as root: %v", err)
	}
	if w, err := c.WatchDir(ctx, id, "/srv/private", false, root); err != nil {
		t.Errorf("watch /srv/private as root: %v", err)
	} else {
		w.Close()
	}
	if _, err := c.MakeDir(ctx, id, "/opt/made", root); err != nil {
		t.Errorf("mkdir /opt/made as root: %v", err)
	}
	if err := c.Remove(ctx, id, "/etc/x", root); err != nil {
		t.Errorf("remove /etc/x as root: %v", err)
	}
	if info, err := c.WriteFile(ctx, id, "mine/f.txt", strings.NewReader("mine")); err != nil || info.Owner != "user" {
		t.Errorf("write mine/f.txt as the sandbox user: %+v, %v; want owned by user", info, err)
	}
	if got := execOK(t, c, id, "stat", "-c", "%U", "/home/user/mine"); strings.TrimSpace(got) != "user" {
		t.Errorf("the directory made for mine/f.txt is %s's, want user's", got)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var fails []string
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.WriteFile(ctx, id, "par/"+strconv.Itoa(i), strings.NewReader("x")); err != nil {
				mu.Lock()
				fails = append(fails, "as user: "+err.Error())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.WriteFile(ctx, id, "/etc/par-"+strconv.Itoa(i), strings.NewReader("x"), root); err != nil {
				mu.Lock()
				fails = append(fails, "as root: "+err.Error())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(fails) > 0 {
		t.Errorf("%d parallel writes failed, first %s", len(fails), fails[0])
	}
	if got := strings.TrimSpace(runPy(t, c, id, "import os; print(os.getuid(), open('/home/user/mine/f.txt').read())")); got != "1000 mine" {
		t.Errorf("the kernel after the file calls: %q, want 1000 mine", got)
	}
}
