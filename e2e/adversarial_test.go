package e2e

// The adversarial suite: hostile code and hostile clients against a real
// server. Every case says what must happen, and the neighbour sandbox (a
// Python variable and a file) is checked intact at the end.
//
// Network cases never leave this machine: every address a sandbox tries,
// allowed or blocked, is first given a listener inside a network namespace
// this test makes, with host routes to those exact /32s, and the server
// lets "the internet" be only 203.0.113.1 (--egress-allow). 192.0.2.0/24 is
// not used: it is this machine's real uplink.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	lznetns "github.com/lizard-build/lizard/internal/netns"
)

// Addresses owned by the test's namespaces.
const (
	inetAddr  = "203.0.113.1" // stands for the internet
	probePort = 8000
)

var privateAddrs = []string{"10.0.0.1", "172.16.0.1", "192.168.0.1", "100.64.0.1", "169.254.169.254"}

// testNet makes namespace name with the addresses given on a veth whose
// host side is hostIf (with hostAddr), routes each address's /32 to it and
// listens on probePort at each. Everything is removed when the test ends.
func testNet(t *testing.T, name, hostIf, hostAddr string, addrs []string) {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", name).Run()
	exec.Command("ip", "link", "del", hostIf).Run()
	run("ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	run("ip", "link", "add", hostIf, "type", "veth", "peer", "name", "lzt-peer", "netns", name)
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostIf).Run() })
	run("ip", "addr", "add", hostAddr+"/32", "dev", hostIf)
	run("ip", "link", "set", hostIf, "up")
	// Replies to masqueraded sandbox traffic come back on this link.
	run("sysctl", "-qw", "net.ipv4.conf."+hostIf+".forwarding=1")
	run("ip", "-n", name, "link", "set", "lo", "up")
	run("ip", "-n", name, "link", "set", "lzt-peer", "up")
	run("ip", "-n", name, "route", "add", hostAddr+"/32", "dev", "lzt-peer")
	run("ip", "-n", name, "route", "add", "default", "via", hostAddr, "dev", "lzt-peer", "onlink")
	for _, a := range addrs {
		run("ip", "-n", name, "addr", "add", a+"/32", "dev", "lzt-peer")
		run("ip", "route", "add", a+"/32", "dev", hostIf)
		t.Cleanup(func() { exec.Command("ip", "route", "del", a+"/32", "dev", hostIf).Run() })
		listenIn(t, name, net.JoinHostPort(a, fmt.Sprint(probePort)))
	}
}

// listenIn serves "hello from ADDR" on addr inside namespace name.
func listenIn(t *testing.T, name, addr string) {
	t.Helper()
	ln := listenNS(t, name, addr)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "hello from %s\n", addr)
			c.Close()
		}
	}()
}

// probe tries a TCP connection from inside sandbox id and says "ok: <what
// it read>" or "blocked: <error>".
func probe(t *testing.T, c *client.Client, id, host string, port int) string {
	t.Helper()
	code := fmt.Sprintf(`import socket
try:
    s = socket.create_connection((%q, %d), timeout=2)
    print("ok:", s.recv(100).decode().strip())
except Exception as e:
    print("blocked:", type(e).__name__)`, host, port)
	out := runPy(t, c, id, code)
	return strings.TrimSpace(out)
}

func runPy(t *testing.T, c *client.Client, id, code string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, err := c.Execute(ctx, id, api.ExecuteRequest{Code: code}, nil)
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	if x.Error != nil {
		return "error: " + x.Error.Name + ": " + x.Error.Message
	}
	return x.Stdout
}

// neighbour is a sandbox whose state every case must leave intact.
type neighbour struct {
	c  *client.Client
	sb *api.Sandbox
}

func newNeighbour(t *testing.T, c *client.Client) *neighbour {
	n := &neighbour{c: c, sb: newSandbox(t, c, api.CreateSandboxRequest{})}
	runPy(t, c, n.sb.SandboxID, "precious = 41 + 1\nopen('/home/user/precious.txt','w').write('keep me')")
	return n
}

func (n *neighbour) check(t *testing.T) {
	t.Helper()
	got := runPy(t, n.c, n.sb.SandboxID, "print(precious, open('/home/user/precious.txt').read())")
	if strings.TrimSpace(got) != "42 keep me" {
		t.Errorf("neighbour lost its state: got %q, want %q", got, "42 keep me")
	}
}

func TestAdversarialNetwork(t *testing.T) {
	s := startServer(t, "--egress=internet", "--egress-allow="+inetAddr+"/32")
	testNet(t, "lizt-inet", "lzt-inet0", "198.51.100.1", []string{inetAddr})
	testNet(t, "lizt-priv", "lzt-priv0", "198.51.100.5", privateAddrs)
	c := s.createProject("net_a")
	n := newNeighbour(t, c)
	open := newSandbox(t, c, api.CreateSandboxRequest{})
	closed := newSandbox(t, c, api.CreateSandboxRequest{AllowInternet: ptr(false)})
	port := s.listenPort(t)

	cases := []struct {
		name, sandbox, host string
		port                int
		want                string
	}{
		{"internet reachable by default", open.SandboxID, inetAddr, probePort, "ok: hello from " + inetAddr},
		{"allowInternet false: no internet", closed.SandboxID, inetAddr, probePort, "blocked"},
		{"host API through the host veth without a token", open.SandboxID, open.SandboxID, port, "blocked"},
		{"another sandbox's agent", open.SandboxID, "neighbour", api.AgentPort, "blocked"},
	}
	for _, a := range privateAddrs {
		cases = append(cases, struct {
			name, sandbox, host string
			port                int
			want                string
		}{"private or metadata " + a, open.SandboxID, a, probePort, "blocked"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.host
			switch host {
			case open.SandboxID:
				host = s.hostAddr(t, open.SandboxID)
			case "neighbour":
				host = s.guestAddr(t, n.sb.SandboxID)
			}
			got := probe(t, c, tc.sandbox, host, tc.port)
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("connect to %s:%d = %q, want %q", host, tc.port, got, tc.want)
			}
		})
	}
	t.Run("raw sockets reach nothing blocked", func(t *testing.T) {
		out := runPy(t, c, open.SandboxID, `import socket
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(2)
    s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("10.0.0.1", 0))
    s.recv(100)
    print("got reply")
except Exception as e:
    print("no reply:", type(e).__name__)`)
		if strings.Contains(out, "got reply") {
			t.Errorf("raw ICMP to 10.0.0.1 got a reply: %q", out)
		}
	})
	n.check(t)
}

func TestAdversarialLizardToken(t *testing.T) {
	s := startServer(t)
	a := s.createProject("tok_a")
	b := s.createProject("tok_b")
	other := newSandbox(t, b, api.CreateSandboxRequest{})
	sb := newSandbox(t, a, api.CreateSandboxRequest{LizardToken: true, Metadata: map[string]string{"who": "me"}})
	plain := newSandbox(t, a, api.CreateSandboxRequest{})

	t.Run("lizard sandbox list inside sees its own project only", func(t *testing.T) {
		out := execOK(t, a, sb.SandboxID, "lizard", "sandbox", "list")
		if !strings.Contains(out, sb.SandboxID) || !strings.Contains(out, plain.SandboxID) || strings.Contains(out, other.SandboxID) {
			t.Errorf("lizard sandbox list inside = %q, want %s and %s but not %s", out, sb.SandboxID, plain.SandboxID, other.SandboxID)
		}
	})
	t.Run("without a token the API is unreachable", func(t *testing.T) {
		host := s.hostAddr(t, plain.SandboxID)
		if got := probe(t, a, plain.SandboxID, host, s.listenPort(t)); !strings.HasPrefix(got, "blocked") {
			t.Errorf("API from a sandbox without token: %q, want blocked", got)
		}
		// Nor through the token sandbox's address.
		if got := probe(t, a, plain.SandboxID, s.hostAddr(t, sb.SandboxID), s.listenPort(t)); !strings.HasPrefix(got, "blocked") {
			t.Errorf("API through another sandbox's host address: %q, want blocked", got)
		}
	})
	t.Run("the key never shows in get, list or logs", func(t *testing.T) {
		key := strings.TrimSpace(execOK(t, a, sb.SandboxID, "sh", "-c", "echo $LIZARD_API_KEY"))
		if !strings.HasPrefix(key, "lz_") {
			t.Fatalf("LIZARD_API_KEY inside = %q", key)
		}
		got, _ := a.GetSandbox(context.Background(), sb.SandboxID)
		list, _ := a.ListSandboxes(context.Background(), client.ListOptions{})
		for what, text := range map[string]string{"get": fmt.Sprint(got), "list": fmt.Sprint(list), "log": s.logs(), "audit": s.audit(t)} {
			if strings.Contains(text, key) || strings.Contains(text, key[strings.LastIndex(key, "_")+1:]) {
				t.Errorf("%s shows the sandbox key", what)
			}
		}
		a.KillSandbox(context.Background(), sb.SandboxID)
		revoked := s.client(key)
		if _, err := revoked.ListSandboxes(context.Background(), client.ListOptions{}); !isStatus(err, 401) {
			t.Errorf("list with the ended sandbox's key: %v, want 401", err)
		}
	})
}

// TestAdversarialCrossProjectPaths: every sandbox-scoped path, with every
// method, answers another project's key 404 as if the sandbox did not
// exist, and nothing it asked for happens.
func TestAdversarialCrossProjectPaths(t *testing.T) {
	s := startServer(t)
	a := s.createProject("cross_a")
	b := s.createProject("cross_b")
	victim := newSandbox(t, b, api.CreateSandboxRequest{})
	execOK(t, b, victim.SandboxID, "bash", "-c", "mkdir -p ~/keep && echo mine > ~/keep/f")
	params := regexp.MustCompile(`\{[^}]+\}`)
	type call struct{ method, path, body string }
	var calls []call
	for _, p := range api.AgentPublicPaths {
		p = params.ReplaceAllString(p, "python")
		for _, method := range []string{"GET", "POST", "PUT", "DELETE"} {
			calls = append(calls, call{method, p + "?path=keep/f&to=stolen&recursive=true", `{"cmd":"rm -rf ~/keep","code":"1"}`})
		}
	}
	// The server's own sandbox paths, each with a body it would take.
	calls = append(calls, call{"GET", "/metrics", ""}, call{"POST", "/timeout", `{"timeoutMs":1}`}, call{"POST", "/pause", ""},
		call{"POST", "/resume", ""}, call{"POST", "/fork", "{}"}, call{"POST", "/snapshots", ""})
	for _, cl := range calls {
		req, _ := http.NewRequest(cl.method, s.url+"/v1/sandboxes/"+victim.SandboxID+cl.path, strings.NewReader(cl.body))
		req.Header.Set("Authorization", "Bearer "+s.keys[a])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", cl.method, cl.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), api.CodeNotFound) {
			t.Errorf("%s %s with another project's key: %d %s, want 404 not_found", cl.method, cl.path, resp.StatusCode, body)
		}
	}
	if out := execOK(t, b, victim.SandboxID, "cat", "/home/user/keep/f"); out != "mine\n" {
		t.Errorf("the victim's file holds %q after the other project's calls, want mine", out)
	}
	if sb, err := b.GetSandbox(context.Background(), victim.SandboxID); err != nil || sb.State != api.StateRunning {
		t.Errorf("the victim after the other project's calls: %+v, %v; want it running", sb, err)
	}
}

func isStatus(err error, status int) bool {
	return err != nil && strings.Contains(err.Error(), fmt.Sprint(status))
}

func TestAdversarialResources(t *testing.T) {
	s := startServer(t, "--memory-mb=512", "--max-memory-mb=1024", "--processes=64", "--disk-mb=64",
		"--max-sandboxes-per-project=3")
	c := s.createProject("res_a")
	n := newNeighbour(t, c)
	bad := newSandbox(t, c, api.CreateSandboxRequest{})
	id := bad.SandboxID

	t.Run("memory bomb is contained", func(t *testing.T) {
		runPy(t, c, id, "x = []\nwhile True: x.append(bytearray(50 << 20))")
		n.check(t)
	})
	t.Run("fork bomb is bounded by the process limit", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.Exec(ctx, id, api.ProcessRequest{Cmd: "f(){ f | f & }; f; sleep 5", TimeoutMs: ms(20000)}, nil)
		n.check(t)
		// The bomb's last processes may outlive its call for a moment,
		// holding the process limit; then the sandbox recovers: its
		// kernel starts a thread again (the next case needs one).
		const thread = "import threading\nt = threading.Thread(target=lambda: None); t.start(); t.join(); print('ok')"
		deadline := time.Now().Add(30 * time.Second)
		for out := runPy(t, c, id, thread); out != "ok\n"; out = runPy(t, c, id, thread) {
			if time.Now().After(deadline) {
				t.Fatalf("30 s after the fork bomb the kernel still cannot start a thread: %q", out)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	t.Run("disk fill stops at the disk limit", func(t *testing.T) {
		out := runPy(t, c, id, `n = 0
try:
    with open('/home/user/fill', 'wb') as f:
        while n < 1024:
            f.write(b'x' * (1 << 20)); f.flush(); n += 1
except OSError as e:
    print("stopped", n, type(e).__name__)
print("wrote", n)`)
		if !strings.Contains(out, "stopped") {
			t.Errorf("filling the disk: %q, want it stopped before 1 GiB", out)
		}
		n.check(t)
	})
	t.Run("over the maximum is a clear 400", func(t *testing.T) {
		_, err := c.CreateSandbox(context.Background(), api.CreateSandboxRequest{MemoryMb: ptr(int64(8192))})
		if !isStatus(err, 400) || !strings.Contains(err.Error(), "memoryMb") {
			t.Errorf("create with memoryMb 8192: %v, want 400 naming memoryMb", err)
		}
	})
	t.Run("too many live sandboxes is a 429", func(t *testing.T) {
		newSandbox(t, c, api.CreateSandboxRequest{}) // the third
		_, err := c.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
		if !isStatus(err, 429) {
			t.Errorf("fourth create: %v, want 429", err)
		}
	})
	t.Run("host files stay out of reach", func(t *testing.T) {
		marker := filepath.Join("/tmp", "lizt-marker-"+id)
		if err := os.WriteFile(marker, []byte("host secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(marker)
		code := fmt.Sprintf(`import os
os.symlink(%[1]q, '/home/user/link')
for p in [%[1]q, '/proc/1/root' + %[1]q, '/home/user/../../..' + %[1]q, '/home/user/link']:
    try: print(open(p).read())
    except OSError as e: print("no", type(e).__name__)`, marker)
		if out := runPy(t, c, id, code); strings.Contains(out, "host secret") {
			t.Errorf("sandbox read a host file: %q", out)
		}
		ctx := context.Background()
		if rc, err := c.ReadFile(ctx, id, "../../.."+marker); err == nil {
			b := make([]byte, 64)
			k, _ := rc.Read(b)
			rc.Close()
			if strings.Contains(string(b[:k]), "host secret") {
				t.Errorf("files API read a host file through ..")
			}
		}
	})
	t.Run("CPU hog: neighbour stays responsive", func(t *testing.T) {
		c.Exec(context.Background(), id, api.ProcessRequest{Cmd: "for i in 1 2 3 4; do (timeout 15 sh -c 'while :; do :; done' &) ; done"}, nil)
		start := time.Now()
		n.check(t)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("neighbour took %s to answer during a CPU hog, want under 5s", d)
		}
	})
	t.Run("killed runsc: sandbox marked failed and cleaned", func(t *testing.T) {
		for _, p := range sandboxPids(id) {
			p.Kill()
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := c.GetSandbox(context.Background(), id)
			if err == nil && got.State == api.StateFailed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox after kill -9 of its processes: %+v, %v; want failed", got, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		waitGone(t, s, bad)
	})
	n.check(t)
}

func ptr[T any](v T) *T { return &v }

func (s *server) listenPort(t *testing.T) int {
	_, p, _ := net.SplitHostPort(s.listen)
	var n int
	fmt.Sscan(p, &n)
	return n
}

// hostAddr is the host side of sandbox id's link.
func (s *server) hostAddr(t *testing.T, id string) string {
	t.Helper()
	l, err := netlink.LinkByName(lznetns.VethName(id))
	if err != nil {
		t.Fatalf("host link of %s: %v", id, err)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		t.Fatalf("addresses of the host link of %s: %v", id, err)
	}
	return addrs[0].IP.String()
}

// guestAddr is the sandbox side: the next address of its /30.
func (s *server) guestAddr(t *testing.T, id string) string {
	a := netip.MustParseAddr(s.hostAddr(t, id))
	return a.Next().String()
}

func (s *server) audit(t *testing.T) string {
	b, _ := os.ReadFile(filepath.Join(s.dataDir, "audit.log"))
	return string(b)
}

// TestAdversarialRuntime: hostile code against the sandbox's own kernel,
// agent and disk, hostile output, a server restart mid-call, hostile file
// paths and a client over its request rate.
func TestAdversarialRuntime(t *testing.T) {
	s := startServer(t, "--disk-mb=64")
	c := s.createProject("rt_a")
	n := newNeighbour(t, c)
	bad := newSandbox(t, c, api.CreateSandboxRequest{})
	id := bad.SandboxID
	ctx := context.Background()

	t.Run("inode exhaustion stops at ENOSPC or EDQUOT", func(t *testing.T) {
		out := runPy(t, c, id, `import os, time, errno, shutil
os.makedirs('/home/user/inodes', exist_ok=True)
n, why, t0 = 0, 'cap', time.time()
try:
    while n < 400000 and time.time() - t0 < 40:
        with open('/home/user/inodes/%d' % n, 'w') as f: f.write('x')
        n += 1
except OSError as e:
    why = errno.errorcode.get(e.errno, str(e.errno))
shutil.rmtree('/home/user/inodes', ignore_errors=True)
print(n, why)`)
		t.Logf("small files created before the stop, and why: %s", strings.TrimSpace(out))
		f := strings.Fields(out)
		if len(f) != 2 || (f[1] != "ENOSPC" && f[1] != "EDQUOT") {
			t.Errorf("creating small files in a 64 MiB disk: %q; want it stopped by ENOSPC or EDQUOT", out)
		}
		if got := runPy(t, c, id, "open('/home/user/after','w').write('ok'); print(open('/home/user/after').read())"); strings.TrimSpace(got) != "ok" {
			t.Errorf("writing after the files were removed: %q", got)
		}
		n.check(t)
	})
	t.Run("100 MB of output and a 100 MB line are bounded", func(t *testing.T) {
		for name, code := range map[string]string{
			"lines": "import sys\nchunk = 'x' * (1 << 20) + '\\n'\nfor _ in range(100): sys.stdout.write(chunk)",
			"line":  "import sys\nsys.stdout.write('y' * (100 << 20))\nsys.stdout.flush()",
		} {
			before := rss(t, s.cmd.Process.Pid)
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			x, err := c.Execute(cctx, id, api.ExecuteRequest{Code: code}, nil)
			cancel()
			after := rss(t, s.cmd.Process.Pid)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if len(x.Stdout) > 16<<20 || !strings.Contains(x.Stdout+x.Stderr, "truncated") {
				t.Errorf("%s: %d bytes of stdout, marker %v; want at most 16 MiB and a truncation marker", name, len(x.Stdout), strings.Contains(x.Stdout+x.Stderr, "truncated"))
			}
			if after-before > 64<<20 {
				t.Errorf("%s: server RSS grew by %d MiB", name, (after-before)>>20)
			}
		}
		if got := strings.TrimSpace(runPy(t, c, id, "print(1 + 1)")); got != "2" {
			t.Errorf("after the floods 1 + 1 = %q", got)
		}
		n.check(t)
	})
	t.Run("infinite loop hits its call timeout, state kept", func(t *testing.T) {
		x, err := c.Execute(ctx, id, api.ExecuteRequest{Code: "spin = 5\nwhile True: pass", TimeoutMs: ms(2000)}, nil)
		if err != nil || x.Error == nil || x.Error.Name != "TimeoutError" {
			t.Fatalf("while True with a 2 s timeout = %+v, %v; want TimeoutError", x, err)
		}
		if got := strings.TrimSpace(runPy(t, c, id, "print(spin)")); got != "5" {
			t.Errorf("after the timeout spin = %q; want 5", got)
		}
	})
	t.Run("kill -9 of the kernel: next call says it restarted, then works", func(t *testing.T) {
		pid := strings.TrimSpace(runPy(t, c, id, "import os; print(os.getpid())"))
		execOK(t, c, id, "kill", "-9", pid)
		x, err := c.Execute(ctx, id, api.ExecuteRequest{Code: "1 + 1"}, nil)
		if err != nil {
			t.Fatalf("call after the kernel was killed: %v", err)
		}
		// The death is never silent: a call that meets the broken kernel
		// fails with KernelDiedError; one that starts after the agent
		// noticed runs on a new kernel with a note on stderr.
		died := x.Error != nil && x.Error.Name == "KernelDiedError" && strings.Contains(x.Error.Message, "restarted")
		noted := x.Error == nil && strings.Contains(x.Stderr, "kernel died") && len(x.Results) == 1 && x.Results[0].Data == "2"
		if !died && !noted {
			t.Errorf("call after kill -9 of the kernel = error %+v, stderr %q, results %+v; want KernelDiedError or a restart note", x.Error, x.Stderr, x.Results)
		}
		if got := strings.TrimSpace(runPy(t, c, id, "import os; print(os.getpid() != "+pid+")")); got != "True" {
			t.Errorf("after the kernel was killed: %q; want a new kernel answering", got)
		}
		n.check(t)
	})
	t.Run("server restart during a call: the call ends, the sandbox lives", func(t *testing.T) {
		runPy(t, c, id, "before_restart = 'yes'")
		type res struct {
			x   *client.Execution
			err error
		}
		done := make(chan res, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			x, err := c.Execute(cctx, id, api.ExecuteRequest{Code: "import time\ntime.sleep(20)\nprint('slept')"}, nil)
			done <- res{x, err}
		}()
		time.Sleep(time.Second)
		s.restart()
		select {
		case r := <-done:
			switch {
			case r.err != nil:
				t.Logf("the call cut by the restart failed: %v", r.err)
			case r.x.Error != nil:
				t.Logf("the call cut by the restart ended with %s: %s", r.x.Error.Name, r.x.Error.Message)
			case strings.TrimSpace(r.x.Stdout) != "slept":
				t.Errorf("the call cut by the restart returned no error and partial output %q: a lost result must be reported", r.x.Stdout)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the call cut by the restart hung")
		}
		if got := strings.TrimSpace(runPy(t, c, id, "print(before_restart)")); got != "yes" {
			t.Errorf("after the restart before_restart = %q; want yes", got)
		}
		n.check(t)
	})
	t.Run("path traversal from home stays inside the sandbox", func(t *testing.T) {
		rc, err := c.ReadFile(ctx, id, "../../etc/passwd")
		if err != nil {
			t.Fatalf("ReadFile ../../etc/passwd: %v", err)
		}
		b := new(strings.Builder)
		_, err = io.Copy(b, rc)
		rc.Close()
		own := execOK(t, c, id, "cat", "/etc/passwd")
		if err != nil || b.String() != own {
			t.Errorf("../../etc/passwd = %q, %v; want the sandbox's own /etc/passwd", b.String(), err)
		}
	})
	t.Run("NUL bytes in file paths are a 400", func(t *testing.T) {
		if _, err := c.ReadFile(ctx, id, "/home/user/a\x00b"); !isStatus(err, 400) {
			t.Errorf("ReadFile with a NUL: %v; want 400", err)
		}
		if _, err := c.WriteFile(ctx, id, "/home/user/a\x00b", strings.NewReader("x")); !isStatus(err, 400) {
			t.Errorf("WriteFile with a NUL: %v; want 400", err)
		}
		if _, err := c.ListDir(ctx, id, "/home\x00/user"); !isStatus(err, 400) {
			t.Errorf("ListDir with a NUL: %v; want 400", err)
		}
	})
	t.Run("kill -9 of the agent: the sandbox is failed and cleaned", func(t *testing.T) {
		pid := strings.TrimSpace(execOK(t, c, id, "sh", "-c",
			`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^/opt/lizard/bin/lizard-agent' && [ ${p#/proc/} != 1 ] && echo ${p#/proc/}; done; true`))
		if pid == "" {
			t.Fatal("no agent process found inside the sandbox")
		}
		res, err := c.Exec(ctx, id, api.ProcessRequest{Cmd: "kill -9 " + pid}, nil)
		if err == nil && res.ExitCode != 0 {
			// The sandbox user may not signal the agent at all.
			if !strings.Contains(res.Stderr, "not permitted") {
				t.Fatalf("kill -9 %s = exit %d %q", pid, res.ExitCode, res.Stderr)
			}
			t.Logf("the sandbox user cannot kill the agent: %s", res.Stderr)
			if got := strings.TrimSpace(runPy(t, c, id, "print(1 + 1)")); got != "2" {
				t.Errorf("after a refused kill 1 + 1 = %q", got)
			}
			return
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := c.GetSandbox(ctx, id)
			if err == nil && got.State == api.StateFailed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox after kill -9 of its agent: %+v, %v; want failed", got, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		waitGone(t, s, bad)
	})
	n.check(t)
}

func TestAdversarialRequestRate(t *testing.T) {
	s := startServer(t, "--requests-per-second=2", "--request-burst=5")
	c := s.createProject("rate_a")
	key := s.keys[c]
	var got *http.Response
	for i := 0; i < 20 && got == nil; i++ {
		req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			got = resp
		}
	}
	if got == nil {
		t.Fatal("20 requests at once with --requests-per-second=2 --request-burst=5: no 429")
	}
	if ra := got.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("429 Retry-After = %q; want a positive number of seconds", ra)
	}
	// Another key has its own budget; the first recovers after waiting.
	other := s.createProject("rate_b")
	if _, err := other.ListSandboxes(context.Background(), client.ListOptions{}); err != nil {
		t.Errorf("another key while the first is limited: %v", err)
	}
	time.Sleep(time.Second)
	if _, err := c.ListSandboxes(context.Background(), client.ListOptions{}); err != nil {
		t.Errorf("the first key after a second: %v", err)
	}
}
