package agentproxy

import (
	"io"
	"strings"
	"testing"
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
			b := &outcomeBody{ReadCloser: io.NopCloser(&chunked{s: tc.stream, n: chunk}),
				report: func(name, msg string) { got = append(got, name+": "+msg) }}
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
