package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/lizard-build/lizard/api"
)

func (ta *testAgent) start(t *testing.T, req api.ProcessStartRequest) api.ProcessInfo {
	t.Helper()
	var info api.ProcessInfo
	ta.json(t, "POST", "/processes", req, &info, http.StatusCreated)
	if info.Pid <= 0 || info.StartedAt.IsZero() {
		t.Fatalf("started %+v: want a pid and a start time", info)
	}
	return info
}

// outputRun is a process's output stream, folded.
type outputRun struct {
	text    string // stdout+stderr text and pty bytes, in order
	stdout  string
	stderr  string
	dropped int64
	end     *api.ProcessOutputEvent
}

// output follows pid's output until until(text so far) holds or it ends.
func (ta *testAgent) output(t *testing.T, ctx context.Context, pid int, until func(string) bool) outputRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp := ta.send(t, ctx, "GET", fmt.Sprintf("/processes/%d/output", pid), nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET output of %d: status %d", pid, resp.StatusCode)
	}
	var run outputRun
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for sc.Scan() {
		var ev api.ProcessOutputEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("decoding %q: %v", sc.Text(), err)
		}
		switch ev.Type {
		case api.EventStdout:
			run.stdout += ev.Text
			text.WriteString(ev.Text)
		case api.EventStderr:
			run.stderr += ev.Text
			text.WriteString(ev.Text)
		case api.OutputPty:
			text.Write(ev.Data)
		case api.OutputDropped:
			run.dropped += ev.Dropped
		case api.EventEnd:
			run.end = &ev
			run.text = text.String()
			return run
		default:
			t.Fatalf("unexpected event %s", sc.Text())
		}
		if until != nil && until(text.String()) {
			run.text = text.String()
			return run
		}
	}
	t.Fatalf("output of %d ended without an end event (err %v); text %q", pid, sc.Err(), text.String())
	return run
}

func TestProcessesLifecycle(t *testing.T) {
	ta := newTestAgent(t, nil)
	ctx := context.Background()
	tests := []struct {
		name       string
		req        api.ProcessStartRequest
		act        func(t *testing.T, pid int) // after the start
		wantStdout string
		wantStderr string
		wantCode   int
		wantError  string
	}{
		{name: "output replayed after the end", req: api.ProcessStartRequest{Cmd: "echo out; echo err >&2; exit 3", Tag: "t1"}, wantStdout: "out\n", wantStderr: "err\n", wantCode: 3},
		{name: "args run as is", req: api.ProcessStartRequest{Args: []string{"printf", "%s-%s", "a b", "c"}}, wantStdout: "a b-c"},
		{name: "envs and cwd", req: api.ProcessStartRequest{Cmd: "echo $FOO; pwd", Envs: map[string]string{"FOO": "bar"}, Cwd: "/tmp"}, wantStdout: "bar\n/tmp\n"},
		{name: "stdin round trip", req: api.ProcessStartRequest{Args: []string{"cat"}, Stdin: true}, act: func(t *testing.T, pid int) {
			path := fmt.Sprintf("/processes/%d/stdin", pid)
			ta.json(t, "POST", path, api.ProcessStdinRequest{Data: []byte("json ")}, nil, http.StatusNoContent)
			ta.json(t, "POST", path, "raw\n", nil, http.StatusNoContent) // not JSON: the bytes themselves
			ta.json(t, "POST", path+"/close", nil, nil, http.StatusNoContent)
			// cat ends at once on the close: either answer is right.
			if status, body := ta.do(t, "POST", path, "late"); status != http.StatusConflict || !strings.Contains(string(body), "closed") && !strings.Contains(string(body), "ended") {
				t.Errorf("stdin after close: %d %s, want 409 saying closed (or ended)", status, body)
			}
		}, wantStdout: "json raw\n"},
		{name: "signal TERM", req: api.ProcessStartRequest{Cmd: "echo ready; exec sleep 60"}, act: func(t *testing.T, pid int) {
			ta.output(t, ctx, pid, func(s string) bool { return strings.Contains(s, "ready") })
			ta.json(t, "POST", fmt.Sprintf("/processes/%d/signal", pid), api.ProcessSignalRequest{Signal: "TERM"}, nil, http.StatusNoContent)
		}, wantStdout: "ready\n", wantCode: 128 + 15},
		{name: "signal by number to the whole group", req: api.ProcessStartRequest{Cmd: "sleep 60 & sleep 60; echo not reached"}, act: func(t *testing.T, pid int) {
			time.Sleep(100 * time.Millisecond)
			ta.json(t, "POST", fmt.Sprintf("/processes/%d/signal", pid), api.ProcessSignalRequest{Signal: "9"}, nil, http.StatusNoContent)
		}, wantCode: 128 + 9},
		{name: "timeout", req: api.ProcessStartRequest{Args: []string{"sleep", "60"}, TimeoutMs: ptr(int64(200))}, wantCode: ExitCodeTimeout, wantError: "timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := ta.start(t, tt.req)
			if info.Tag != tt.req.Tag {
				t.Errorf("tag %q, want %q", info.Tag, tt.req.Tag)
			}
			if tt.act != nil {
				tt.act(t, info.Pid)
			}
			run := ta.output(t, ctx, info.Pid, nil)
			if run.stdout != tt.wantStdout || run.stderr != tt.wantStderr {
				t.Errorf("stdout %q stderr %q, want %q %q", run.stdout, run.stderr, tt.wantStdout, tt.wantStderr)
			}
			if run.end.ExitCode == nil || *run.end.ExitCode != tt.wantCode || !strings.Contains(run.end.Error, tt.wantError) {
				t.Errorf("end %+v, want exit code %d error %q", run.end, tt.wantCode, tt.wantError)
			}
			// A second reader after the end sees the same replay.
			if again := ta.output(t, ctx, info.Pid, nil); again.stdout != run.stdout {
				t.Errorf("second replay %q, want %q", again.stdout, run.stdout)
			}
			var got api.ProcessInfo
			ta.json(t, "GET", fmt.Sprintf("/processes/%d?wait=1", info.Pid), nil, &got, http.StatusOK)
			if got.Running || got.ExitCode == nil || *got.ExitCode != tt.wantCode || got.EndedAt == nil {
				t.Errorf("wait: %+v, want ended with %d", got, tt.wantCode)
			}
			// Reaped: no zombie of it is left.
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", info.Pid)); err == nil && strings.Contains(string(b), ") Z ") {
				t.Errorf("process %d is a zombie: %s", info.Pid, b)
			}
		})
	}
}

// TestProcessTimeoutKills: a timeout kills the process's group, or with
// timeoutKills "process" the process alone, what it started living on
// (E2B's envd, whose Desktop SDK opens a browser under a 60 s deadline).
func TestProcessTimeoutKills(t *testing.T) {
	ta := newTestAgent(t, nil)
	ctx := context.Background()
	for _, tt := range []struct {
		kills         string
		childOutlives bool
	}{
		{"", false},
		{"group", false},
		{"process", true},
	} {
		t.Run("kills="+tt.kills, func(t *testing.T) {
			info := ta.start(t, api.ProcessStartRequest{Cmd: "sleep 60 & echo $!; wait", TimeoutMs: ptr(int64(300)), TimeoutKills: tt.kills})
			run := ta.output(t, ctx, info.Pid, nil)
			if run.end.ExitCode == nil || *run.end.ExitCode != ExitCodeTimeout {
				t.Fatalf("end %+v, want the timeout's exit code %d", run.end, ExitCodeTimeout)
			}
			child, err := strconv.Atoi(strings.TrimSpace(run.stdout))
			if err != nil {
				t.Fatalf("the child's pid: %q", run.stdout)
			}
			alive := func() bool {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
				return err == nil && !strings.Contains(string(b), ") Z ")
			}
			if !tt.childOutlives {
				deadline := time.Now().Add(5 * time.Second)
				for alive() && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
			}
			if got := alive(); got != tt.childOutlives {
				t.Errorf("the shell's child alive after the timeout = %v, want %v", got, tt.childOutlives)
			}
			if alive() {
				syscall.Kill(child, syscall.SIGKILL)
			}
		})
	}
}

func TestProcessesBadInput(t *testing.T) {
	ta := newTestAgent(t, nil)
	ended := ta.start(t, api.ProcessStartRequest{Cmd: "true"})
	ta.json(t, "GET", fmt.Sprintf("/processes/%d?wait=1", ended.Pid), nil, nil, http.StatusOK)
	live := ta.start(t, api.ProcessStartRequest{Args: []string{"sleep", "60"}})
	defer ta.do(t, "POST", fmt.Sprintf("/processes/%d/signal", live.Pid), api.ProcessSignalRequest{Signal: "KILL"})
	tests := []struct {
		name       string
		method     string
		path       string
		body       any
		wantStatus int
		wantWords  string
	}{
		{"empty cmd", "POST", "/processes", api.ProcessStartRequest{}, 400, "cmd:"},
		{"cmd and args", "POST", "/processes", api.ProcessStartRequest{Cmd: "x", Args: []string{"y"}}, 400, "cmd:"},
		{"long tag", "POST", "/processes", api.ProcessStartRequest{Cmd: "true", Tag: strings.Repeat("t", 257)}, 400, "tag:"},
		{"timeoutKills", "POST", "/processes", api.ProcessStartRequest{Cmd: "true", TimeoutKills: "session"}, 400, "timeoutKills:"},
		{"pty cols", "POST", "/processes", api.ProcessStartRequest{Pty: &api.PtySize{Cols: 0, Rows: 24}}, 400, "pty.cols:"},
		{"pty rows", "POST", "/processes", api.ProcessStartRequest{Pty: &api.PtySize{Cols: 80, Rows: 1001}}, 400, "pty.rows:"},
		{"no such program", "POST", "/processes", api.ProcessStartRequest{Args: []string{"no-such-program-x"}}, 400, "args:"},
		{"unknown user", "POST", "/processes", api.ProcessStartRequest{Cmd: "true", User: "mallory"}, 400, "user:"},
		{"unknown field", "POST", "/processes", map[string]any{"cmd": "true", "colour": 1}, 400, "colour"},
		{"unknown pid", "GET", "/processes/999999/output", nil, 404, "no process 999999"},
		{"pid not a number", "POST", "/processes/abc/signal", api.ProcessSignalRequest{Signal: "TERM"}, 404, "no process"},
		{"bad signal name", "POST", fmt.Sprintf("/processes/%d/signal", live.Pid), api.ProcessSignalRequest{Signal: "BOGUS"}, 400, "signal:"},
		{"bad signal number", "POST", fmt.Sprintf("/processes/%d/signal", live.Pid), api.ProcessSignalRequest{Signal: "99"}, 400, "signal:"},
		{"no signal", "POST", fmt.Sprintf("/processes/%d/signal", live.Pid), api.ProcessSignalRequest{}, 400, "signal:"},
		{"resize bounds", "POST", fmt.Sprintf("/processes/%d/resize", live.Pid), api.PtySize{Cols: 2000, Rows: 10}, 400, "cols:"},
		{"resize without a pty", "POST", fmt.Sprintf("/processes/%d/resize", live.Pid), api.PtySize{Cols: 80, Rows: 10}, 409, "no terminal"},
		{"stdin never opened", "POST", fmt.Sprintf("/processes/%d/stdin", live.Pid), "x", 409, "stdin is closed"},
		{"stdin after the end", "POST", fmt.Sprintf("/processes/%d/stdin", ended.Pid), "x", 409, "ended"},
		{"signal after the end", "POST", fmt.Sprintf("/processes/%d/signal", ended.Pid), api.ProcessSignalRequest{Signal: "TERM"}, 404, "ended"},
		{"close after the end", "POST", fmt.Sprintf("/processes/%d/stdin/close", ended.Pid), nil, 404, "ended"},
		{"wrong method", "DELETE", "/processes", nil, 405, "not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := ta.do(t, tt.method, tt.path, tt.body)
			if status != tt.wantStatus || !strings.Contains(string(body), tt.wantWords) {
				t.Errorf("%s %s: %d %s, want %d with %q", tt.method, tt.path, status, body, tt.wantStatus, tt.wantWords)
			}
		})
	}
}

func TestProcessesTerminal(t *testing.T) {
	ta := newTestAgent(t, nil)
	ctx := context.Background()
	info := ta.start(t, api.ProcessStartRequest{Args: []string{"bash", "--norc", "--noprofile", "-i"}, Pty: &api.PtySize{Cols: 80, Rows: 24}})
	if info.Pty == nil || info.Pty.Cols != 80 {
		t.Fatalf("info %+v: want a pty of 80 columns", info)
	}
	stdin := fmt.Sprintf("/processes/%d/stdin", info.Pid)
	ta.json(t, "POST", stdin, "echo TERM=$TERM $((6*7))\n", nil, http.StatusNoContent)
	ta.output(t, ctx, info.Pid, func(s string) bool { return strings.Contains(s, "TERM=xterm-256color 42") })
	ta.json(t, "POST", fmt.Sprintf("/processes/%d/resize", info.Pid), api.PtySize{Cols: 123, Rows: 45}, nil, http.StatusNoContent)
	ta.json(t, "POST", stdin, "stty size\n", nil, http.StatusNoContent)
	ta.output(t, ctx, info.Pid, func(s string) bool { return strings.Contains(s, "45 123") })
	if status, body := ta.do(t, "POST", stdin+"/close", nil); status != http.StatusConflict {
		t.Errorf("closing a terminal's input: %d %s, want 409", status, body)
	}

	// The same terminal over a WebSocket: input, resize, the end.
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ta.url, "http")+fmt.Sprintf("/processes/%d/ws", info.Pid), nil)
	if err != nil {
		t.Fatalf("dialing the WebSocket: %v", err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","cols":100,"rows":30}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("stty size; exit 7\n")); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		typ, msg, err := c.Read(rctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Fatalf("reading the WebSocket: %v; got %q", err, got.String())
			}
			break
		}
		if typ == websocket.MessageBinary {
			got.Write(msg)
			continue
		}
		var m api.ProcessControl
		if err := json.Unmarshal(msg, &m); err != nil {
			t.Fatalf("control %q: %v", msg, err)
		}
		if m.Type == api.EventEnd {
			if m.ExitCode == nil || *m.ExitCode != 7 {
				t.Errorf("end %+v, want exit code 7", m)
			}
			if !strings.Contains(got.String(), "30 100") {
				t.Errorf("terminal output %q: want stty size 30 100 after the resize", got.String())
			}
			return
		}
	}
	t.Fatalf("WebSocket closed without an end; got %q", got.String())
}

// TestProcessesFloodBounded: a process that writes as fast as it can, with
// a reader that never reads, must not grow the agent's memory: the output
// log keeps 1 MiB and the stuck reader loses the rest.
func TestProcessesFloodBounded(t *testing.T) {
	ta := newTestAgent(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	info := ta.start(t, api.ProcessStartRequest{Cmd: "cat /dev/zero | tr '\\0' x"})
	defer ta.do(t, "POST", fmt.Sprintf("/processes/%d/signal", info.Pid), api.ProcessSignalRequest{Signal: "KILL"})
	goroutines := runtime.NumGoroutine()
	stuckCtx, leave := context.WithCancel(ctx)
	stuck := ta.send(t, stuckCtx, "GET", fmt.Sprintf("/processes/%d/output", info.Pid), nil) // never read
	defer stuck.Body.Close()
	p := ta.launch.procs.get(info.Pid)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var peak uint64
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if n := p.out.bytes(); n > outputLogBytes+readChunk {
			t.Fatalf("output log holds %d bytes, bound %d", n, outputLogBytes)
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapInuse)
	}
	p.out.mu.Lock()
	written := p.out.end
	p.out.mu.Unlock()
	if written < 16*outputLogBytes {
		t.Fatalf("the process wrote only %d bytes in 3 s: the stuck reader held it back", written)
	}
	if grew := int64(peak) - int64(before.HeapInuse); grew > 48<<20 {
		t.Errorf("heap grew by %d MiB while %d MiB of output went by a stuck reader; want a bound", grew>>20, written>>20)
	}
	// A live reader meanwhile is told what it missed, and keeps up.
	run := ta.output(t, ctx, info.Pid, func(s string) bool { return len(s) > 4*outputLogBytes })
	if run.dropped == 0 {
		t.Errorf("a reader that attached after %d bytes was not told of any dropped output", written)
	}
	// A reader that leaves while the flood goes on is gone for good: its
	// handler does not keep following the output.
	leave()
	stuck.Body.Close()
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > goroutines+2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines 5 s after the stuck reader left, %d before it came: its handler follows on", runtime.NumGoroutine(), goroutines)
			break
		}
	}
	t.Logf("flood: %d MiB written, heap in use %d -> peak %d MiB", written>>20, before.HeapInuse>>20, peak>>20)
}

func TestOutputLogBound(t *testing.T) {
	tests := []struct {
		name        string
		writes      int
		size        int
		readAt      int64
		wantDropped int64
	}{
		{"within the bound", 10, 1000, 0, 0},
		{"past the bound", 100, 32 << 10, 0, 100*(32<<10) - outputLogBytes},
		{"reader in the middle", 100, 32 << 10, 50 * (32 << 10), 50*(32<<10) - outputLogBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newOutputLog(outputLogBytes)
			for i := 0; i < tt.writes; i++ {
				l.write("stdout", make([]byte, tt.size))
			}
			if l.bytes() > outputLogBytes {
				t.Errorf("kept %d bytes, bound %d", l.bytes(), outputLogBytes)
			}
			var total int64
			off := tt.readAt
			_, dropped, _, _, _ := l.read(off, 1<<30)
			if dropped != max(tt.wantDropped, 0) {
				t.Errorf("dropped %d, want %d", dropped, max(tt.wantDropped, 0))
			}
			for {
				chunks, _, next, _, _ := l.read(off, 64<<10)
				if len(chunks) == 0 {
					break
				}
				for _, c := range chunks {
					total += int64(len(c.data))
				}
				off = next
			}
			if want := int64(tt.writes*tt.size) - max(tt.readAt, int64(tt.writes*tt.size)-int64(l.bytes())); total != want {
				t.Errorf("read %d bytes, want %d", total, want)
			}
		})
	}
}

// TestProcessesListFull lists as many running processes as a sandbox may
// run (maxBackground; it was 1000 before the bound).
func TestProcessesListFull(t *testing.T) {
	ta := newTestAgent(t, nil)
	const n = maxBackground
	for i := 0; i < n; i++ {
		ta.start(t, api.ProcessStartRequest{Args: []string{"sleep", "120"}, Tag: fmt.Sprintf("p%d", i)})
	}
	var list api.ProcessList
	ta.json(t, "GET", "/processes", nil, &list, http.StatusOK)
	if len(list.Processes) != n {
		t.Fatalf("listed %d processes, want %d", len(list.Processes), n)
	}
	tags := map[string]bool{}
	for _, p := range list.Processes {
		if !p.Running || p.Args[0] != "sleep" {
			t.Errorf("listed %+v: want a running sleep", p)
		}
		tags[p.Tag] = true
	}
	if len(tags) != n {
		t.Errorf("%d distinct tags, want %d", len(tags), n)
	}
	// Close (the test's cleanup) kills them all; check that it does.
	pid := list.Processes[0].Pid
	p := ta.launch.procs.get(pid)
	ta.Close()
	select {
	case <-p.ended:
	case <-time.After(10 * time.Second):
		t.Errorf("process %d still running 10 s after the agent closed", pid)
	}
}

func ptr[T any](v T) *T { return &v }

// TestProcessesBounded: a sandbox runs at most maxTerminals terminals and
// maxBackground other background processes at once (issue 33: 300
// terminals in a 1 GiB sandbox ended it); past either the start is a 429
// naming the bound, the other kind still starts, and a place comes back
// when its process ends.
func TestProcessesBounded(t *testing.T) {
	ta := newTestAgent(t, nil)
	term := api.ProcessStartRequest{Cmd: "sleep 600", Pty: &api.PtySize{Cols: 80, Rows: 24}}
	bg := api.ProcessStartRequest{Cmd: "sleep 600"}
	var terms, bgs []api.ProcessInfo
	for range maxTerminals {
		terms = append(terms, ta.start(t, term))
	}
	for range maxBackground {
		bgs = append(bgs, ta.start(t, bg))
	}
	for _, tc := range []struct {
		name string
		req  api.ProcessStartRequest
		want string
	}{
		{"terminal", term, fmt.Sprintf("%d terminals", maxTerminals)},
		{"background", bg, fmt.Sprintf("%d background processes", maxBackground)},
	} {
		var e api.Error
		ta.json(t, "POST", "/processes", tc.req, &e, http.StatusTooManyRequests)
		if e.Code != api.CodeRateLimited || !strings.Contains(e.Message, tc.want) {
			t.Errorf("one %s past the bound: %+v; want rate_limited naming %q", tc.name, e, tc.want)
		}
	}
	// A place comes back once its process has ended.
	for _, p := range []api.ProcessInfo{terms[0], bgs[0]} {
		ta.json(t, "POST", fmt.Sprintf("/processes/%d/signal", p.Pid), api.ProcessSignalRequest{Signal: "SIGKILL"}, nil, http.StatusNoContent)
		deadline := time.Now().Add(10 * time.Second)
		for {
			var info api.ProcessInfo
			ta.json(t, "GET", fmt.Sprintf("/processes/%d", p.Pid), nil, &info, http.StatusOK)
			if !info.Running {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d still runs 10 s after SIGKILL", p.Pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ta.start(t, term)
	ta.start(t, bg)
}
