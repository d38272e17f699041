package secret

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/metrics"
)

const good = "0123456789abcdef0123456789abcdef0123456789abcdef"

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		secret, want string // want "" accepted
	}{
		{"", "set LIZARD_CLUSTER_SECRET"},
		{"0123456789abcdef", "16 bytes, under the 32"},
		{strings.Repeat("a", 31), "openssl rand -hex 32"},
		{"CHANGE-ME-to-openssl-rand-hex-32", "placeholder"},
		{strings.Repeat("a", 32), ""},
		{good, ""},
	} {
		err := Validate(tc.secret, "LIZARD_CLUSTER_SECRET")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Validate(%q) = %v; want accepted", tc.secret, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Validate(%q) = %v; want refused with %q", tc.secret, err, tc.want)
		}
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestChecker(t *testing.T) (*Checker, *clock, *metrics.Metrics, *bytes.Buffer) {
	var logs bytes.Buffer
	m := metrics.New()
	c := NewChecker(good, "node", slog.New(slog.NewTextHandler(&logs, nil)), m)
	clk := &clock{time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	return c, clk, m, &logs
}

func check(c *Checker, remote, presented string) error {
	r := httptest.NewRequest("POST", "/internal/v1/sandboxes/x/pause", nil)
	r.RemoteAddr = remote
	return c.Check(r, presented)
}

// TestThrottle: an address may fail Burst times, then its checks are 429
// (the secret not compared, the right one included) until its bucket
// refills at one a second; another address, and the right secret from
// one that has not failed, are never slowed. Before, 2,100 guesses took
// 3 s.
func TestThrottle(t *testing.T) {
	c, clk, m, logs := newTestChecker(t)
	const attacker, other = "203.0.113.7:4000", "198.51.100.9:5000"
	for i := range Burst {
		if err := check(c, attacker, fmt.Sprintf("guess-%d", i)); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Fatalf("guess %d: %v; want ErrUnauthenticated", i, err)
		}
	}
	for i, presented := range []string{"guess-x", "", good} {
		err := check(c, attacker, presented)
		var e *errdefs.Error
		if !errors.Is(err, errdefs.ErrRateLimited) || !errors.As(err, &e) || e.RetryAfter < time.Second || e.RetryAfter > 2*time.Second {
			t.Fatalf("throttled check %d (%q): %v; want ErrRateLimited with a Retry-After of about 1 s", i, presented, err)
		}
	}
	// Another port of the same address is the same source.
	if err := check(c, "203.0.113.7:4001", good); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Errorf("the right secret from the throttled address's other port: %v; want ErrRateLimited", err)
	}
	if err := check(c, other, good); err != nil {
		t.Errorf("the right secret from another address: %v; want nil", err)
	}
	// One failure a second after the burst.
	clk.t = clk.t.Add(time.Second)
	if err := check(c, attacker, "guess-y"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("a guess 1 s later: %v; want ErrUnauthenticated (checked)", err)
	}
	if err := check(c, attacker, "guess-z"); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Errorf("the next guess at once: %v; want ErrRateLimited", err)
	}
	clk.t = clk.t.Add(time.Second)
	if err := check(c, attacker, good); err != nil {
		t.Errorf("the right secret once the bucket has a token: %v; want nil", err)
	}
	// 1,000 guesses in a second from one address: Burst checked at most.
	c2, _, _, _ := newTestChecker(t)
	checked := 0
	for i := range 1000 {
		if err := check(c2, attacker, fmt.Sprint(i)); errors.Is(err, errdefs.ErrUnauthenticated) {
			checked++
		}
	}
	if checked != Burst {
		t.Errorf("1,000 guesses at once: %d checked; want %d", checked, Burst)
	}
	// IPv6: one /64 is one source.
	c3, _, _, _ := newTestChecker(t)
	for i := range Burst {
		check(c3, fmt.Sprintf("[2001:db8:1:2::%x]:80", i+1), "guess")
	}
	if err := check(c3, "[2001:db8:1:2:ffff::1]:80", "guess"); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Errorf("a 6th guess from the same /64: %v; want ErrRateLimited", err)
	}
	if err := check(c3, "[2001:db8:1:3::1]:80", good); err != nil {
		t.Errorf("the right secret from another /64: %v; want nil", err)
	}

	// The metric counts each refusal; the log holds one line for them all
	// (at most one each 10 s).
	scrape := httptest.NewRecorder()
	m.Handler().ServeHTTP(scrape, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`lizard_cluster_secret_refusals_total{reason="wrong",surface="node"} 6`,
		`lizard_cluster_secret_refusals_total{reason="throttled",surface="node"} 5`,
	} {
		if !strings.Contains(scrape.Body.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(scrape.Body.String(), "lizard_cluster_secret"))
		}
	}
	if n := strings.Count(logs.String(), "refused requests without the cluster secret"); n != 1 {
		t.Errorf("%d log lines for 12 refusals within 10 s; want 1:\n%s", n, logs)
	}
}

// TestFailingBounded: the addresses remembered for their failures are
// bounded; when every slot holds one failing now, a new address's check
// is 429 unless it has shown the right secret before, so more addresses
// than slots do not make a faster guesser.
func TestFailingBounded(t *testing.T) {
	c, clk, _, _ := newTestChecker(t)
	const known = "192.0.2.200:1"
	if err := check(c, known, good); err != nil {
		t.Fatal(err)
	}
	for i := range maxFailing {
		check(c, fmt.Sprintf("10.%d.%d.1:1", i/256, i%256), "guess")
	}
	if len(c.failing) != maxFailing {
		t.Fatalf("%d addresses remembered; want %d", len(c.failing), maxFailing)
	}
	if err := check(c, "172.16.0.1:1", good); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Errorf("a new address while every slot fails: %v; want ErrRateLimited", err)
	}
	if err := check(c, known, good); err != nil {
		t.Errorf("an address that showed the secret before: %v; want nil", err)
	}
	// Once the buckets have refilled, they are forgotten.
	clk.t = clk.t.Add(Burst * time.Second)
	if err := check(c, "172.16.0.1:1", good); err != nil {
		t.Errorf("a new address once the others' buckets refilled: %v; want nil", err)
	}
	if len(c.failing) > 1 {
		t.Errorf("%d addresses remembered after refilling; want them forgotten", len(c.failing))
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
