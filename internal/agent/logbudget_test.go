package agent

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestLogBudget(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	b := newLogBudget(&out, func() time.Time { return now })
	line := func(n int) []byte { return []byte(strings.Repeat("x", n-1) + "\n") }
	steps := []struct {
		name    string
		advance time.Duration
		size    int
		written bool
	}{
		{"the burst", 0, logBurst - 100, true},
		{"within what is left", 0, 100, true},
		{"over it", 0, 1, false},
		{"a second later, over the rate", time.Second, logRate + 1, false},
		{"the rate fits, after the note", 10 * time.Second, logRate, true},
		{"no note once said", 0, logRate, true},
	}
	for _, st := range steps {
		now = now.Add(st.advance)
		before := out.Len()
		if n, err := b.Write(line(st.size)); n != st.size || err != nil {
			t.Fatalf("%s: Write = %d, %v; want %d, nil (a dropped line is no error)", st.name, n, err, st.size)
		}
		got := out.Len() - before
		switch {
		case st.written && got < st.size, !st.written && got != 0:
			t.Errorf("%s: wrote %d bytes of a %d-byte line; want it written %v", st.name, got, st.size, st.written)
		}
		if st.name == "the rate fits, after the note" && !strings.Contains(out.String()[before:], "2 log lines dropped") {
			t.Errorf("%s: wrote %q; want the note of 2 dropped lines first", st.name, out.String()[before:])
		}
	}
}

// Code inside a sandbox sends its own agent requests, each refused with a
// log line naming its path: the agent's log, a file on the host, stays
// within the budget however many it sends.
func TestRefusedRequestsBounded(t *testing.T) {
	var out bytes.Buffer
	ta := newTestAgent(t, func(c *Config) { c.Secret = "s3cret"; c.Logger = NewLogger(&out) })
	start := time.Now()
	path := "/" + strings.Repeat("a", 60000)
	for i := range 100 {
		resp, err := http.Get(ta.url + path + fmt.Sprint(i)) // from loopback: inside
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request from inside = %d; want 401", resp.StatusCode)
		}
	}
	bound := logBurst + int(time.Since(start).Seconds()*logRate) + 4096
	if out.Len() > bound {
		t.Errorf("100 refused requests of %d-byte paths logged %d bytes; want at most %d", len(path), out.Len(), bound)
	}
	if !strings.Contains(out.String(), "refused a request") {
		t.Errorf("the log holds no refusal: %.200q", out.String())
	}
}
