package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

func newStore(t *testing.T) (*Store, *store.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, p := range []string{"p", "q"} {
		if err := st.CreateProject(ctx, p, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	k, err := LoadOrCreateKey(filepath.Join(t.TempDir(), KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return &Store{Store: st, Key: k}, st
}

// testScope is where the tests' secrets may be sent.
var testScope = Scope{Hosts: []string{"api.example.com"}}

func TestSetOpen(t *testing.T) {
	ctx := context.Background()
	s, st := newStore(t)
	const value = "sk-live-0123456789"
	info, err := s.Set(ctx, "p", "TOKEN", value, testScope)
	if err != nil || info.Name != "TOKEN" || info.CreatedAt.IsZero() {
		t.Fatalf("Set = %+v, %v", info, err)
	}
	row, err := st.Secrets().Get(ctx, "p", "TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(row.Sealed, []byte(value)) || row.KeyID != s.Key.ID() {
		t.Errorf("the stored row holds the value in the clear or another key ID: %+v", row)
	}
	got, err := s.Open(ctx, "p", "TOKEN", Use{SandboxID: "sb", Host: "api.example.com"})
	if err != nil || got != value {
		t.Errorf("Open = %q, %v; want %q", got, err, value)
	}
	// Another project has no such secret.
	if _, err := s.Open(ctx, "q", "TOKEN", Use{Host: "api.example.com"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Open of another project's secret: %v; want ErrNotFound", err)
	}
	// A sealed value moved to another project's row does not open.
	row.ProjectID = "q"
	if err := st.Secrets().Put(ctx, row); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Open(ctx, "q", "TOKEN", Use{Host: "api.example.com"}); err == nil || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Open of a sealed value copied to another project = %q, %v; want ErrUnavailable", v, err)
	}
	list, err := s.List(ctx, "p")
	if err != nil || len(list) != 1 || list[0].Name != "TOKEN" {
		t.Errorf("List = %+v, %v", list, err)
	}
	if err := s.Delete(ctx, "p", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "p", "TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Delete again: %v; want ErrNotFound", err)
	}
}

func TestWrongKey(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	if _, err := s.Set(ctx, "p", "TOKEN", "v1", testScope); err != nil {
		t.Fatal(err)
	}
	other, err := LoadOrCreateKey(filepath.Join(t.TempDir(), KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if other.ID() == s.Key.ID() {
		t.Fatal("two new keys have one ID")
	}
	s2 := &Store{Store: s.Store, Key: other}
	v, err := s2.Open(ctx, "p", "TOKEN", Use{Host: "api.example.com"})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), s.Key.ID()) || strings.Contains(err.Error(), "v1") {
		t.Errorf("Open with another key = %q, %v; want ErrUnavailable naming key %s", v, err, s.Key.ID())
	}
	// Same ID, other bytes (a forged ID): the tag does not verify.
	other.id = s.Key.ID()
	if v, err := s2.Open(ctx, "p", "TOKEN", Use{Host: "api.example.com"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Open with other key bytes under the same ID = %q, %v; want ErrUnavailable", v, err)
	}
	noKey := &Store{Store: s.Store}
	if _, err := noKey.Set(ctx, "p", "X", "v", testScope); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Set without a key: %v; want ErrUnavailable", err)
	}
	if _, err := noKey.Open(ctx, "p", "TOKEN", Use{Host: "api.example.com"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Open without a key: %v; want ErrUnavailable", err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	for _, tc := range []struct {
		name, value, want string
	}{
		{"1ABC", "v", "secret name"},
		{"has-dash", "v", "secret name"},
		{"", "v", "secret name"},
		{strings.Repeat("A", 129), "v", "secret name"},
		{"OK", "", "value is empty"},
		{"OK", strings.Repeat("x", MaxValueBytes+1), "over the 65536 bytes"},
		{"OK", "line\nbreak", "value holds a NUL, CR or LF"},
	} {
		_, err := s.Set(ctx, "p", tc.name, tc.value, testScope)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Set(%q, %d bytes) = %v; want ErrInvalid saying %q", tc.name, len(tc.value), err, tc.want)
		}
	}
	if _, err := s.Set(ctx, "p", "MAX", strings.Repeat("x", MaxValueBytes), testScope); err != nil {
		t.Errorf("Set of exactly 64 KiB: %v", err)
	}
	if err := s.Check(ctx, "p", []Ref{{Field: "inject[0].headers.Authorization", Name: "MAX", Domain: "api.example.com"}}); err != nil {
		t.Errorf("Check of a secret the project has: %v", err)
	}
	err := s.Check(ctx, "q", []Ref{{Field: "inject[0].headers.Authorization", Name: "MAX", Domain: "api.example.com"}})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "inject[0].headers.Authorization") {
		t.Errorf("Check of another project's secret = %v; want ErrInvalid naming the field", err)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", KeyFile)
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, %v; want mode 0600", fi, err)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil || k2.ID() != k1.ID() {
		t.Errorf("loading the made key again = %v, %v; want ID %s", k2, err, k1.ID())
	}
	for _, bad := range []string{"", "short", strings.Repeat("A", 44), "not base64!"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted a bad key", bad)
		}
	}
}

// TestMaxPerProject: a project has at most MaxPerProject secrets (each up
// to 64 KiB of the store, on the server's disk); one it has may be set
// again, and another project is not counted with it.
func TestMaxPerProject(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	for i := range MaxPerProject {
		if _, err := s.Set(ctx, "p", fmt.Sprintf("S%d", i), "v", testScope); err != nil {
			t.Fatalf("secret %d: %v", i+1, err)
		}
	}
	_, err := s.Set(ctx, "p", "ONE_MORE", "v", testScope)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "100 secrets") {
		t.Errorf("secret %d of a project: %v; want a conflict naming the bound", MaxPerProject+1, err)
	}
	if _, err := s.Set(ctx, "p", "S0", "again", testScope); err != nil {
		t.Errorf("setting a secret the project has again: %v", err)
	}
	if _, err := s.Set(ctx, "q", "ONE_MORE", "v", testScope); err != nil {
		t.Errorf("another project's secret: %v", err)
	}
}

// TestAuditCoalesced: a sandbox's uses of a secret are one audit line at
// once and at most one an interval after it, counting the uses, not one a
// use — a line per request let code in a sandbox write the node's audit
// log at its request rate, without bound — and another sandbox's first use
// has its own line at once.
func TestAuditCoalesced(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	var mu sync.Mutex
	var buf bytes.Buffer
	s.Audit = slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil))
	s.AuditEvery = 100 * time.Millisecond
	if _, err := s.Set(ctx, "p", "TOKEN", "sk-live-0123456789", testScope); err != nil {
		t.Fatal(err)
	}
	lines := func(sandbox string) (out []map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "secret.use" && m["sandbox_id"] == sandbox {
				out = append(out, m)
			}
		}
		return out
	}
	open := func(sandbox string) {
		if _, err := s.Open(ctx, "p", "TOKEN", Use{SandboxID: sandbox, Host: "api.example.com"}); err != nil {
			t.Fatal(err)
		}
	}
	const uses = 1000
	start := time.Now()
	open("sb1")
	if got := lines("sb1"); len(got) != 1 || got[0]["count"] != 1.0 || got[0]["host"] != "api.example.com" {
		t.Fatalf("audit lines right after the first use: %v; want one, count 1", got)
	}
	for i := 1; i < uses; i++ {
		open("sb1")
	}
	open("sb2")
	if got := lines("sb2"); len(got) != 1 {
		t.Errorf("sb2's lines right after its first use: %v; want one", got)
	}
	time.Sleep(3 * s.AuditEvery) // the last interval's line at 1×, its end at 2×
	got := lines("sb1")
	sum := 0.0
	for _, l := range got {
		n, _ := l["count"].(float64)
		sum += n
	}
	if most := int(time.Since(start)/s.AuditEvery) + 2; len(got) > most || sum != uses {
		t.Errorf("%d uses in %v made %d audit lines counting %v uses; want at most %d, counting %d", uses, time.Since(start), len(got), sum, most, uses)
	}
	s.mu.Lock()
	left := len(s.uses)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("%d secret uses still held after an idle interval; want none", left)
	}
	// Used again after an idle interval: a line at once.
	open("sb1")
	if again := lines("sb1"); len(again) != len(got)+1 || again[len(got)]["count"] != 1.0 {
		t.Errorf("audit lines after a use past an idle interval: %v; want one more at once", again[len(got):])
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestScope: a secret names where it may be sent, at set (required,
// normalized as network rules are); a policy aiming it elsewhere is
// refused naming the secret and the host; a secret set before hosts
// existed goes nowhere; and Open checks the host and plain HTTP again.
func TestScope(t *testing.T) {
	ctx := context.Background()
	s, st := newStore(t)
	for _, tc := range []struct {
		hosts []string
		want  string
	}{
		{nil, "hosts: give the hosts"},
		{[]string{}, "hosts: give the hosts"},
		{[]string{"api.example.com", "203.0.113.7"}, "hosts[1]"},
		{[]string{"a.*.example.com"}, "hosts[0]"},
	} {
		if _, err := s.Set(ctx, "p", "T", "v", Scope{Hosts: tc.hosts}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Set with hosts %q = %v; want ErrInvalid saying %q", tc.hosts, err, tc.want)
		}
	}
	info, err := s.Set(ctx, "p", "T", "v", Scope{Hosts: []string{"API.Example.COM.", "*.openai.com", "api.example.com"}})
	if err != nil || fmt.Sprint(info.Hosts) != "[api.example.com *.openai.com]" || info.AllowHTTP {
		t.Fatalf("Set = %+v, %v; want the hosts normalized, once each", info, err)
	}
	ref := func(domain string) []Ref {
		return []Ref{{Field: "network.inject[0].headers[Authorization]", Name: "T", Domain: domain}}
	}
	for _, ok := range []string{"api.example.com", "api.openai.com", "*.eu.openai.com"} {
		if err := s.Check(ctx, "p", ref(ok)); err != nil {
			t.Errorf("Check for %s: %v", ok, err)
		}
	}
	for _, bad := range []string{"echo.attacker.test", "example.com", "*.example.com", "openai.com"} {
		err := s.Check(ctx, "p", ref(bad))
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `secret "T" for `+bad+", which is not one of the hosts") {
			t.Errorf("Check for %s = %v; want ErrInvalid naming T and %s", bad, err, bad)
		}
	}
	// A row from before hosts were recorded: refused, saying to set it again.
	row, _ := st.Secrets().Get(ctx, "p", "T")
	row.Name, row.Hosts = "OLD", nil
	if err := st.Secrets().Put(ctx, row); err != nil {
		t.Fatal(err)
	}
	err = s.Check(ctx, "p", []Ref{{Field: "network.inject[0].headers[X]", Name: "OLD", Domain: "api.example.com"}})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "set before secrets named their hosts") {
		t.Errorf("Check of a secret without hosts = %v; want ErrInvalid saying to set it again", err)
	}
	if _, err := s.Open(ctx, "p", "OLD", Use{Host: "api.example.com"}); !errors.Is(err, errdefs.ErrForbidden) {
		t.Errorf("Open of a secret without hosts = %v; want ErrForbidden", err)
	}
	for _, tc := range []struct {
		use  Use
		want string // "" for opened
	}{
		{Use{Host: "api.example.com"}, ""},
		{Use{Host: "x.api.openai.com"}, ""},
		{Use{Host: "echo.attacker.test"}, "may not be sent to echo.attacker.test"},
		{Use{Host: "api.example.com", Plain: true}, "may not be sent over plain HTTP"},
	} {
		v, err := s.Open(ctx, "p", "T", tc.use)
		if tc.want == "" && (err != nil || v != "v") || tc.want != "" && (!errors.Is(err, errdefs.ErrForbidden) || v != "" || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Open(%+v) = %q, %v; want %q", tc.use, v, err, tc.want)
		}
	}
	if _, err := s.Set(ctx, "p", "T", "v", Scope{Hosts: []string{"api.example.com"}, AllowHTTP: true}); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Open(ctx, "p", "T", Use{Host: "api.example.com", Plain: true}); err != nil || v != "v" {
		t.Errorf("Open over plain HTTP of a secret that allows it = %q, %v", v, err)
	}
}
