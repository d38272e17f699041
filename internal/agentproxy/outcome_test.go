package agentproxy

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestOutcomeBody feeds /execute streams to outcomeBody in chunks of
// every size: it passes them through unchanged and reports a timeout or
// a dead kernel once, and nothing else.
func TestOutcomeBody(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		name, stream string
		want         string // "name: message", or "" for no report
	}{
		{"timeout", `{"type":"stdout","text":"a"}` + "\n" + `{"type":"error","error":{"name":"TimeoutError","message":"execution timed out after 1s","traceback":""}}` + "\n" + `{"type":"end"}` + "\n",
			"TimeoutError: execution timed out after 1s"},
		{"kernel died", `{"type":"error","error":{"name":"KernelDiedError","message":"the kernel died (killed by signal KILL, perhaps for running out of memory) and was restarted; its variables are gone","traceback":""}}` + "\n",
			"KernelDiedError: the kernel died (killed by signal KILL, perhaps for running out of memory) and was restarted; its variables are gone"},
		{"code's own error", `{"type":"error","error":{"name":"ZeroDivisionError","message":"division by zero","traceback":"..."}}` + "\n" + `{"type":"end"}` + "\n", ""},
		{"error text on stdout", `{"type":"stdout","text":"{\"type\":\"error\",\"error\":{\"name\":\"TimeoutError\"}}"}` + "\n", ""},
		{"long lines", `{"type":"result","result":{"data":"` + big + `"}}` + "\n" + `{"type":"error","error":{"name":"TimeoutError","message":"m","traceback":"` + big + `"}}` + "\n", ""},
		{"no newline at the end", `{"type":"error","error":{"name":"TimeoutError","message":"m","traceback":""}}`, ""},
	} {
		for _, chunk := range []int{1, 7, 64, 1 << 20} {
			var got []string
			b := newOutcomeBody(io.NopCloser(&chunked{s: tc.stream, n: chunk}), Outcome{Op: OpExecute}, time.Now(),
				func(name, msg string) { got = append(got, name+": "+msg) }, nil)
			out, err := io.ReadAll(b)
			if err != nil || string(out) != tc.stream {
				t.Errorf("%s, chunks of %d: passed %d bytes, %v; want the stream unchanged", tc.name, chunk, len(out), err)
			}
			want := []string{}
			if tc.want != "" {
				want = append(want, tc.want)
			}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("%s, chunks of %d: reported %q; want %q", tc.name, chunk, got, want)
			}
		}
	}
}

// TestOutcomes: a run's result is read from its stream, whatever the
// chunks it comes in, and told once when the stream ends or is closed.
func TestOutcomes(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		name, op string
		lines    []string
		close    bool // closed before its end was read
		want     string
		died     bool
	}{
		{"ok", OpExecute, []string{`{"type":"stdout","text":"` + long + `"}`, `{"type":"result","result":{"type":"result","mime":"text/plain","data":"1"}}`, `{"type":"end","executionCount":1}`}, false, ResultOK, false},
		{"the code raised", OpExecute, []string{`{"type":"error","error":{"name":"ZeroDivisionError","message":"division by zero","traceback":"` + long + `"}}`, `{"type":"end"}`}, false, ResultError, false},
		{"timeout", OpExecute, []string{`{"type":"error","error":{"name":"TimeoutError","message":"","traceback":""}}`, `{"type":"end"}`}, false, ResultTimeout, false},
		{"cut", OpExecute, []string{`{"type":"stdout","text":"a"}`}, false, ResultCut, false},
		{"closed before its end", OpExecute, []string{`{"type":"stdout","text":"a"}`, `{"type":"end"}`}, true, ResultCut, false},
		{"kernel died during it", OpExecute, []string{`{"type":"error","error":{"name":"KernelDiedError","message":"the kernel died and was restarted","traceback":""}}`, `{"type":"end"}`}, false, ResultKernelDied, true},
		{"kernel died before it", OpExecute, []string{`{"type":"stderr","text":"[lizard] the kernel died (killed) after the previous call and was restarted; variables from earlier calls are gone\n"}`,
			`{"type":"result","result":{"type":"result","mime":"text/plain","data":"1"}}`, `{"type":"end","executionCount":1}`}, false, ResultOK, true},
		{"stderr that only looks like the notice", OpExecute, []string{`{"type":"stdout","text":"[lizard] the kernel died"}`, `{"type":"end"}`}, false, ResultOK, false},
		{"command ok", OpProcess, []string{`{"type":"end","exitCode":0}`}, false, ResultOK, false},
		{"command exit 1", OpProcess, []string{`{"type":"stderr","text":"no"}`, `{"type":"end","exitCode":1}`}, false, ResultExitNonzero, false},
		{"command timeout", OpProcess, []string{`{"type":"end","exitCode":124,"error":"timed out"}`}, false, ResultTimeout, false},
		{"command failed", OpProcess, []string{`{"type":"end","exitCode":-1,"error":"not found"}`}, false, ResultFailed, false},
		{"command cut", OpProcess, []string{`{"type":"stdout","text":"a"}`}, false, ResultCut, false},
	} {
		for _, chunk := range []int{1, 7, 1 << 20} {
			stream := strings.Join(tc.lines, "\n") + "\n"
			var got []Outcome
			b := newOutcomeBody(io.NopCloser(&chunked{s: stream, n: chunk}), Outcome{Op: tc.op}, time.Now(), nil,
				func(o Outcome) { got = append(got, o) })
			if tc.close {
				b.Read(make([]byte, 10))
			} else {
				io.ReadAll(b)
			}
			b.Close()
			if len(got) != 1 || got[0].Result != tc.want || got[0].KernelDied != tc.died {
				t.Errorf("%s, chunks of %d: told %+v; want once, %s, kernel died %v", tc.name, chunk, got, tc.want, tc.died)
			}
		}
	}
}

// chunked reads s n bytes at a time.
type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.s))
	copy(p, c.s[:k])
	c.s = c.s[k:]
	return k, nil
}
