package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lizard-build/lizard/api"
)

func TestOutWriterKeepsRunesWhole(t *testing.T) {
	text := "héllo wörld — 日本語 🦎 end"
	for split := 1; split < 8; split++ {
		t.Run(strconv.Itoa(split), func(t *testing.T) {
			rec := httptest.NewRecorder()
			s := newSink(rec, 0, executeText)
			o := &outWriter{s: s, kind: "stdout"}
			b := []byte(text)
			for len(b) > 0 {
				n := min(split, len(b))
				o.Write(b[:n])
				b = b[n:]
			}
			o.flush()
			var got strings.Builder
			sc := bufio.NewScanner(rec.Body)
			for sc.Scan() {
				var ev api.ExecuteEvent
				json.Unmarshal(sc.Bytes(), &ev)
				if !utf8.ValidString(ev.Text) || strings.ContainsRune(ev.Text, utf8.RuneError) {
					t.Errorf("event text %q is not whole runes", ev.Text)
				}
				got.WriteString(ev.Text)
			}
			if got.String() != text {
				t.Errorf("text = %q, want %q", got.String(), text)
			}
		})
	}
}

func TestSinkTruncates(t *testing.T) {
	tests := []struct {
		name    string
		limit   int64
		writes  []string
		want    string // forwarded output
		dropped int
	}{
		{"under the limit", 10, []string{"abc", "def"}, "abcdef", 0},
		{"exactly the limit", 6, []string{"abc", "def"}, "abcdef", 0},
		{"cut mid write", 4, []string{"abc", "def", "ghi"}, "abcd", 5},
		{"cut before a split rune", 4, []string{"abcé"}, "abc", 2},
		{"nothing after a cut", 4, []string{"abcé", "x"}, "abc", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s := newSink(rec, tt.limit, executeText)
			for _, w := range tt.writes {
				s.output("stdout", []byte(w))
			}
			s.event(api.ExecuteEvent{Type: api.EventEnd})
			var out, marker string
			sc := bufio.NewScanner(rec.Body)
			for sc.Scan() {
				var ev api.ExecuteEvent
				json.Unmarshal(sc.Bytes(), &ev)
				switch ev.Type {
				case api.EventStdout:
					out += ev.Text
				case api.EventStderr:
					marker += ev.Text
				}
			}
			if out != tt.want {
				t.Errorf("forwarded %q, want %q", out, tt.want)
			}
			wantMarker := ""
			if tt.dropped > 0 {
				wantMarker = fmt.Sprintf("[lizard: output truncated after %d bytes; %d bytes dropped]\n", tt.limit, tt.dropped)
			}
			if marker != wantMarker {
				t.Errorf("marker %q, want %q", marker, wantMarker)
			}
		})
	}
}

// TestExecuteHugeOutputIsBounded prints 100 MB and checks that at most the
// limit is forwarded, a marker tells the rest, and the agent's memory does
// not grow with the output.
func TestExecuteHugeOutputIsBounded(t *testing.T) {
	ta := newTestAgent(t, nil)
	const total = 100_000_000
	tests := []struct{ name, code string }{
		{"many lines", fmt.Sprintf("yes 'a line of output' | head -c %d", total)},
		{"one line", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", total)},
		{"both streams", fmt.Sprintf("yes out | head -c %d & yes err | head -c %d >&2; wait", total/2, total/2)},
	}
	markerRE := regexp.MustCompile(`^\[lizard: output truncated after 8 MiB; (\d+) bytes dropped\]\n$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resetPeakRSS(t)
			before := rss(t, "VmRSS")
			resp := ta.send(t, context.Background(), "POST", "/execute", api.ExecuteRequest{Language: "bash", Code: tt.code})
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			var forwarded, dropped int64
			markers := 0
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			var last api.ExecuteEvent
			for sc.Scan() {
				var ev api.ExecuteEvent
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
					t.Fatal(err)
				}
				if len(ev.Text) > maxChunk {
					t.Errorf("event of %d bytes, want at most %d", len(ev.Text), maxChunk)
				}
				if m := markerRE.FindStringSubmatch(ev.Text); ev.Type == api.EventStderr && m != nil {
					markers++
					dropped, _ = strconv.ParseInt(m[1], 10, 64)
					continue
				}
				forwarded += int64(len(ev.Text))
				last = ev
			}
			if last.Type != api.EventEnd || last.Error != nil {
				t.Errorf("last event %+v, want a clean end", last)
			}
			if forwarded != DefaultMaxOutputBytes || markers != 1 || forwarded+dropped != total {
				t.Errorf("forwarded %d bytes, %d markers, %d dropped; want %d, 1 marker, %d dropped",
					forwarded, markers, dropped, DefaultMaxOutputBytes, total-DefaultMaxOutputBytes)
			}
			peak := rss(t, "VmHWM")
			if growth := peak - before; growth > 64<<20 {
				t.Errorf("peak RSS grew by %d MiB while streaming 100 MB, want under 64 MiB", growth>>20)
			}
			t.Logf("RSS before %d MiB, peak %d MiB", before>>20, peak>>20)
		})
	}
}

// resetPeakRSS makes VmHWM start again from the current RSS.
func resetPeakRSS(t *testing.T) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset peak RSS: %v", err)
	}
}

func rss(t *testing.T, field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// flushCounter is a ResponseWriter that counts flushes.
type flushCounter struct {
	*httptest.ResponseRecorder
	mu      sync.Mutex
	flushes int
}

func (f *flushCounter) Flush() {
	f.mu.Lock()
	f.flushes++
	f.mu.Unlock()
}

func (f *flushCounter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushes
}

func flushed(s *sink) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.unflushed
}

func TestSinkFlushes(t *testing.T) {
	t.Run("a burst goes out with the end of the body", func(t *testing.T) {
		w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
		s := newSink(w, 0, executeText)
		s.event(api.ExecuteEvent{Type: api.EventResult, Result: &api.Result{Type: "result", Mime: "text/plain", Data: "2"}})
		s.event(api.ExecuteEvent{Type: api.EventEnd, ExecutionCount: 1})
		s.close()
		// Headers, result and end go with the end of the body, which
		// net/http writes when the handler returns (on a slow machine the
		// headers' timer may have fired first).
		if got := w.count(); got > 1 {
			t.Errorf("flushes = %d, want at most 1", got)
		}
		if n := strings.Count(w.Body.String(), "\n"); n != 2 {
			t.Errorf("body has %d lines, want 2: %q", n, w.Body.String())
		}
	})
	t.Run("a lone event is flushed soon without an end", func(t *testing.T) {
		w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
		s := newSink(w, 0, executeText)
		defer s.close()
		s.output("stdout", []byte("working\n"))
		deadline := time.Now().Add(5 * time.Second)
		for !flushed(s) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !flushed(s) || w.count() == 0 {
			t.Errorf("the output was not flushed without an end (%d flushes)", w.count())
		}
	})
	t.Run("headers go out soon when nothing else does", func(t *testing.T) {
		w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
		s := newSink(w, 0, executeText)
		defer s.close()
		deadline := time.Now().Add(5 * time.Second)
		for w.count() < 1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := w.count(); got != 1 {
			t.Errorf("flushes = %d after waiting, want 1 (the headers)", got)
		}
	})
	t.Run("nothing is written after close", func(t *testing.T) {
		w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
		s := newSink(w, 0, executeText)
		s.output("stdout", []byte("a"))
		s.close()
		n := w.count()
		s.output("stdout", []byte("b"))
		time.Sleep(3 * flushDelay)
		if strings.Contains(w.Body.String(), `"b"`) || w.count() != n {
			t.Errorf("the sink wrote after close: %q, %d flushes (was %d)", w.Body.String(), w.count(), n)
		}
	})
}

// TestSinkResultsBounded: a run's results pass as long as they fit in
// api.MaxResultBytes together, charts of a few MB included; one past it is
// an error event saying so in its place, and later results that fit still
// pass. An error's text is cut. No line is longer than api.MaxExecuteLine,
// which the API process's readers hold whole: before, a result was as long
// as the kernel's 256 MiB frame, and each concurrent one was that much of
// the API process's memory.
func TestSinkResultsBounded(t *testing.T) {
	rec := httptest.NewRecorder()
	s := newSink(rec, 0, executeText)
	chart := strings.Repeat("iVBORw0KGgo", 3<<20/11) // a 3 MB PNG's base64
	const charts = 12                                // 36 MB: past the 32 MiB
	for range charts {
		s.event(api.ExecuteEvent{Type: api.EventResult, Result: &api.Result{Type: "display_data", Mime: "image/png", Data: chart}})
	}
	s.event(api.ExecuteEvent{Type: api.EventResult, Result: &api.Result{Type: "result", Mime: "text/plain", Data: "2"}})
	huge := "é" + strings.Repeat("x", 10<<20) + "end"
	s.event(api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{Name: "ValueError", Message: huge, Traceback: huge}})
	s.event(api.ExecuteEvent{Type: api.EventEnd})
	s.close()
	var pngs, small, tooLarge int
	for i, line := range strings.SplitAfter(rec.Body.String(), "\n") {
		if line == "" {
			continue
		}
		if len(line) > api.MaxExecuteLine {
			t.Errorf("line %d is %d bytes; want at most api.MaxExecuteLine (%d)", i, len(line), api.MaxExecuteLine)
		}
		var ev api.ExecuteEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		switch {
		case ev.Result != nil && ev.Result.Mime == "image/png":
			pngs++
		case ev.Result != nil:
			small++
		case ev.Error != nil && ev.Error.Name == ErrNameResultTooLarge:
			tooLarge++
			if !strings.HasPrefix(ev.Error.Message, fmt.Sprintf("result too large: %d bytes, limit %d", len(chart)+len(`{"type":"result","result":{"type":"display_data","mime":"image/png","data":""}}`+"\n"), api.MaxResultBytes)) {
				t.Errorf("the stand-in's message = %q; want it to say the result's size and the limit", ev.Error.Message)
			}
		case ev.Error != nil:
			if len(line) > 4*maxErrorText || !strings.HasPrefix(ev.Error.Message, "éxxx") || !strings.HasSuffix(ev.Error.Traceback, "xxend") || !utf8.ValidString(line) {
				t.Errorf("the error's line is %d bytes, message starting %.10q, traceback ending %q; want it cut to its start and end", len(line), ev.Error.Message, ev.Error.Traceback[max(0, len(ev.Error.Traceback)-10):])
			}
		}
	}
	if want := int(api.MaxResultBytes / (len(chart) + 100)); pngs != want || tooLarge != charts-want || small != 1 {
		t.Errorf("%d charts of %d bytes made %d results and %d stand-ins, and the small result after them %d; want %d, %d and 1", charts, len(chart), pngs, tooLarge, small, want, charts-want)
	}
}
