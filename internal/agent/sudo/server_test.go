package sudo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/internal/testenv"
)

// The test binary is also the sudo client: a test starts it with these
// set to be one (as another uid, on a terminal, or to be killed).
const (
	clientSocketEnv = "LIZARD_SUDO_TEST_SOCKET"
	clientArgsEnv   = "LIZARD_SUDO_TEST_ARGS"
)

// clientBin is a copy of the test binary that every user may run (go
// test's own is in a directory of root's alone).
var clientBin string

func TestMain(m *testing.M) {
	if socket := os.Getenv(clientSocketEnv); socket != "" {
		var args []string
		json.Unmarshal([]byte(os.Getenv(clientArgsEnv)), &args)
		os.Exit(run(args, socket, os.Stdin, os.Stdout, os.Stderr))
	}
	dir, err := os.MkdirTemp("", "sudo-client-")
	if err == nil {
		clientBin = filepath.Join(dir, "sudo.test")
		err = copyFile(os.Args[0], clientBin)
		os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "copying the test binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// nobody is the sandbox user of these tests: a uid the host's root can
// switch to.
const nobody = 65534

// serve starts a Server on a socket in a fresh directory that every user
// may reach, with its own passwd and group files.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o755)
	}
	passwd := filepath.Join(dir, "passwd")
	group := filepath.Join(dir, "group")
	os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:65534:65534:user:/tmp:/bin/sh\n"), 0o644)
	os.WriteFile(group, []byte("root:x:0:\nnogroup:x:65534:\nsudo:x:27:user\n"), 0o644)
	s.users = accounts{passwd: passwd, group: group}
	s.UserUID = nobody
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	socket := filepath.Join(dir, "run", "sudo.sock")
	ln, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return socket
}

// client runs sudo with args in a process of its own, as uid (-1: root),
// with stdin, and returns its exit status and output.
func client(t *testing.T, socket string, uid int, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := clientCmd(t, socket, uid, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

func clientCmd(t *testing.T, socket string, uid int, args ...string) *exec.Cmd {
	a, _ := json.Marshal(args)
	cmd := exec.Command(clientBin)
	cmd.Env = append(os.Environ(), clientSocketEnv+"="+socket, clientArgsEnv+"="+string(a), "FOO=from-caller")
	cmd.Dir = "/"
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	return cmd
}

func TestServerRuns(t *testing.T) {
	socket := serve(t, &Server{})
	dir := t.TempDir()
	os.Chmod(dir, 0o700) // root's alone, as /root is
	file := filepath.Join(dir, "x")
	for _, tc := range []struct {
		name   string
		uid    int
		stdin  string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "whoami", uid: nobody, args: []string{"id", "-u"}, stdout: "0\n"},
		{name: "-u user", uid: nobody, args: []string{"-u", "user", "id", "-u"}, stdout: "65534\n"},
		{name: "-u #uid", uid: 0, args: []string{"-u", "#65534", "id", "-u"}, stdout: "65534\n"},
		{name: "groups", uid: nobody, args: []string{"-u", "user", "id", "-G"}, stdout: "65534 27\n"},
		{name: "tee to a root-only directory", uid: nobody, stdin: "hi\n", args: []string{"tee", file}, stdout: "hi\n"},
		{name: "read it back", uid: nobody, args: []string{"cat", file}, stdout: "hi\n"},
		{name: "exit status", uid: nobody, args: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}, code: 7, stdout: "out\n", stderr: "err\n"},
		{name: "false", uid: nobody, args: []string{"false"}, code: 1},
		{name: "env reset", uid: nobody, args: []string{"sh", "-c", "echo ${FOO:-none} $SUDO_USER $SUDO_UID $HOME $USER"}, stdout: "none user 65534 /root root\n"},
		{name: "-E", uid: nobody, args: []string{"-E", "sh", "-c", "echo $FOO"}, stdout: "from-caller\n"},
		{name: "sh -c", uid: nobody, args: []string{"sh", "-c", "whoami 2>/dev/null || id -un"}, stdout: "root\n"},
		{name: "-i runs in home", uid: nobody, args: []string{"-i", "pwd"}, stdout: "/root\n"},
		{name: "unknown user", uid: nobody, args: []string{"-u", "ghost", "id"}, code: 1, stderr: "sudo: unknown user ghost\n"},
		{name: "not found", uid: nobody, args: []string{"no-such-command-x"}, code: 1, stderr: "sudo: no-such-command-x: command not found\n"},
		{name: "bad option", uid: nobody, args: []string{"-x", "id"}, code: 1, stderr: "sudo: invalid option -- 'x'\n" + usage},
		{name: "chdir the target cannot enter", uid: nobody, args: []string{"-u", "user", "-D", dir, "true"}, code: 1,
			stderr: "sudo: unable to execute /usr/bin/true in " + dir + ": permission denied\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := client(t, socket, tc.uid, tc.stdin, tc.args...)
			if code != tc.code || out != tc.stdout || errs != tc.stderr {
				t.Errorf("sudo %q = %d, %q, %q; want %d, %q, %q", tc.args, code, out, errs, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// TestServerRefusesOtherUsers: who connects is the kernel's word
// (SO_PEERCRED), not the client's. A real process of another uid is
// refused, and so is any uid but root's and the sandbox user's.
func TestServerRefusesOtherUsers(t *testing.T) {
	socket := serve(t, &Server{})
	code, out, errs := client(t, socket, 4321, "", "id", "-u")
	if code != 1 || out != "" || !strings.Contains(errs, "#4321 is not in the sudoers file") {
		t.Errorf("sudo as uid 4321 = %d, %q, %q; want 1 and refused", code, out, errs)
	}

	faked := serve(t, &Server{peer: func(*net.UnixConn) (unix.Ucred, error) { return unix.Ucred{Uid: 1}, nil }})
	code, _, errs = client(t, faked, 0, "", "id")
	if code != 1 || !strings.Contains(errs, "not in the sudoers file") {
		t.Errorf("sudo from a peer of uid 1 = %d, %q; want refused", code, errs)
	}
}

// rawRequest connects as root and sends b with fds, returning the reply.
func rawRequest(t *testing.T, socket string, b []byte, fds ...int) Reply {
	t.Helper()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	go func() {
		// The server may answer before it has read all of b. A sendmsg
		// may take part of b: the rest follows without descriptors.
		n, _, err := uc.WriteMsgUnix(b, oob, nil)
		if err == nil && n < len(b) {
			uc.Write(b[n:])
		}
	}()
	c := &conn{c: uc}
	uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var rep Reply
	if err := c.recv(&rep, maxMessageBytes, 4); err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	closeFDs(c.takeFDs())
	return rep
}

func openFDs(t *testing.T) int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestServerAdversarial: garbage, a huge request, too few or too many
// descriptors each get a message and leave nothing open; a flood is
// bounded by Max and by the handshake's deadline.
func TestServerAdversarial(t *testing.T) {
	old := handshakeTimeout
	handshakeTimeout = time.Second
	t.Cleanup(func() { handshakeTimeout = old })
	socket := serve(t, &Server{Max: 4})
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	fd := int(devnull.Fd())
	good, _ := json.Marshal(Request{Command: []string{"true"}})
	good = append(good, '\n')
	before := openFDs(t)
	for _, tc := range []struct {
		name string
		b    []byte
		fds  []int
		want string
	}{
		{"garbage", []byte("\x00\xffnot json at all\n"), []int{fd, fd, fd}, "could not read the request"},
		{"huge", bytes.Repeat([]byte("a"), 3<<20), []int{fd, fd, fd}, "longer than 1048576 bytes"},
		{"huge argv", append(append([]byte(`{"command":["echo","`), bytes.Repeat([]byte("a"), 2<<20)...), `"]}`+"\n"...), []int{fd, fd, fd}, "longer than"},
		{"no descriptors", good, nil, "carried 0 file descriptors"},
		{"two descriptors", good, []int{fd, fd}, "carried 2 file descriptors"},
		{"four descriptors", good, []int{fd, fd, fd, fd}, "too many file descriptors"},
		{"sixty-four descriptors", good, bytes2fds(fd, 64), "too many file descriptors"},
		{"nothing sent", nil, nil, "i/o timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := rawRequest(t, socket, tc.b, tc.fds...)
			if !strings.Contains(rep.Error, tc.want) || rep.Started {
				t.Errorf("reply = %+v, want an error with %q", rep, tc.want)
			}
		})
	}
	// The server is in this process: every descriptor it received is closed.
	deadline := time.Now().Add(5 * time.Second)
	for openFDs(t) > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if after := openFDs(t); after > before {
		t.Errorf("open descriptors %d after the bad requests, %d before", after, before)
	}
	if rep := rawRequest(t, socket, good, fd, fd, fd); !rep.Started {
		t.Errorf("a good request after them = %+v, want started", rep)
	}
	time.Sleep(200 * time.Millisecond) // its session ends (true) and frees its slot

	// Four connections that send nothing hold the four sessions; a fifth
	// is refused at once, and the four lose their slots at the deadline.
	var held []*net.UnixConn
	for range 4 {
		uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		held = append(held, uc)
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	code, _, errs := client(t, socket, 0, "", "true")
	// Refused, not queued: a queued one would run once the held slots
	// free at the deadline and exit 0. Its time is logged, not checked.
	if code != 1 || !strings.Contains(errs, "4 sudo commands run in this sandbox already") {
		t.Errorf("sudo past the bound = %d, %q after %v; want refused", code, errs, time.Since(start))
	}
	t.Logf("refused after %v", time.Since(start))
	time.Sleep(handshakeTimeout)
	if code, _, errs := client(t, socket, 0, "", "true"); code != 0 {
		t.Errorf("sudo after the idle connections' deadline = %d, %q; want 0", code, errs)
	}
}

func bytes2fds(fd, n int) []int {
	fds := make([]int, n)
	for i := range fds {
		fds[i] = fd
	}
	return fds
}

// waitGone waits for process pid (not this process's child) to end.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("process %d still runs", pid)
	syscall.Kill(pid, syscall.SIGKILL)
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", file)
	return 0
}

// TestServerSignals: a signal sudo gets reaches the command, which ends
// sudo with its own status; a sudo killed outright takes its command
// with it.
func TestServerSignals(t *testing.T) {
	socket := serve(t, &Server{})
	dir := t.TempDir()
	os.Chmod(dir, 0o777)

	pidFile := filepath.Join(dir, "trap")
	cmd := clientCmd(t, socket, nobody, "sh", "-c", `trap 'exit 42' TERM; echo $$ > `+pidFile+`; sleep 100 & wait`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readPid(t, pidFile)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 42 {
		t.Errorf("sudo after SIGTERM = %d, want the trap's 42", code)
	}

	pidFile = filepath.Join(dir, "killed")
	cmd = clientCmd(t, socket, nobody, "sh", "-c", `echo $$ > `+pidFile+`; exec sleep 100`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := readPid(t, pidFile)
	cmd.Process.Kill()
	cmd.Wait()
	waitGone(t, pid)

	pidFile = filepath.Join(dir, "signaled")
	cmd = clientCmd(t, socket, nobody, "sh", "-c", `echo $$ > `+pidFile+`; exec sleep 100`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(readPid(t, pidFile), syscall.SIGKILL)
	cmd.Wait()
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("sudo whose command was killed ended %v, want killed by SIGKILL as its command", cmd.ProcessState)
	}
}

// TestServerTerminal: on a terminal the command gets a terminal of its
// own, whose input and output sudo relays, and stays interactive.
func TestServerTerminal(t *testing.T) {
	socket := serve(t, &Server{})
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 100})
	cmd := clientCmd(t, socket, nobody, "sh", "-c", `stty size; tty >/dev/null && echo on-a-tty; read x; echo "got:$x"; id -u; exit 3`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty = true, true
	tty.Chown(nobody, -1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var out bytes.Buffer
	read := make(chan struct{})
	go func() { io.Copy(&out, ptmx); close(read) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "on-a-tty") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	ptmx.Write([]byte("hello\n"))
	cmd.Wait()
	<-read
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Errorf("sudo on a terminal = %d, want 3", code)
	}
	for _, want := range []string{"30 100", "on-a-tty", "got:hello", "0\r\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("terminal output %q lacks %q", out.String(), want)
		}
	}
}

// TestListenAndInstall: the socket's directory is made root's and 0755
// even when a template left a link or another user's directory there,
// and a template's own (stripped, useless) sudo is replaced by the link.
func TestListenAndInstall(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	elsewhere := filepath.Join(dir, "elsewhere")
	os.Mkdir(elsewhere, 0o777)
	os.Chown(elsewhere, nobody, nobody)
	for _, planted := range []string{"link", "owned"} {
		run := filepath.Join(dir, planted)
		if planted == "link" {
			os.Symlink(elsewhere, run)
		} else {
			os.Mkdir(run, 0o777)
			os.Chown(run, nobody, nobody)
		}
		ln, err := Listen(filepath.Join(run, "sudo.sock"))
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		fi, err := os.Lstat(run)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || fi.Mode().Perm() != 0o755 || st.Uid != 0 {
			t.Errorf("%s: the socket's directory is %v uid %d, want a directory of root's, 0755", planted, fi.Mode(), st.Uid)
		}
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "sudo.sock")); err == nil {
		t.Error("the socket was made through the planted link")
	}

	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	sudo := filepath.Join(bin, "sudo")
	os.WriteFile(sudo, []byte("#!/bin/sh\necho a template's sudo\n"), 0o755)
	if err := Install(sudo, "/opt/lizard/bin/lizard-agent"); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(sudo); err != nil || got != "/opt/lizard/bin/lizard-agent" {
		t.Errorf("sudo links to %q (%v), want the agent", got, err)
	}
}
