// Package secret is the cluster secret (LIZARD_CLUSTER_SECRET,
// docs/cluster.md): how long it must be, and how a request that presents
// it is checked. It commands every node and every sandbox, and both
// surfaces that take it (a node's API, and the API's /v1/nodes) may face
// the network, so a failed check is throttled per source address: without
// that, a stranger tried 2,100 guesses in 3 s.
package secret

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/metrics"
)

// MinLen is the shortest secret a cluster role starts with: 32 bytes, as
// `openssl rand -hex 32` gives 64.
const MinLen = 32

// Validate refuses, saying what to do, a secret under MinLen bytes or the
// Helm chart's placeholder (deploy/manifests/lizard.yaml ships it).
func Validate(s, env string) error {
	switch {
	case s == "":
		return fmt.Errorf("set %s to the cluster's shared secret, the same on every node and api process, at least %d bytes (openssl rand -hex 32)", env, MinLen)
	case len(s) < MinLen:
		return fmt.Errorf("%s is %d bytes, under the %d a cluster secret needs (it commands every node and sandbox, and is guessed through the network): make one with openssl rand -hex 32 and give it to every node and api process", env, len(s), MinLen)
	case strings.HasPrefix(s, "CHANGE-ME"):
		return fmt.Errorf("%s is still the manifest's placeholder %q: make one with openssl rand -hex 32 and give it to every node and api process", env, s)
	}
	return nil
}

// The throttle: each source address may fail Burst checks at once, then
// one each 1/Rate; an address that has not failed is never slowed.
const (
	Burst = 5
	Rate  = 1.0 // failures a second, after the burst
	// maxFailing bounds the addresses remembered for their failures
	// (about 100 bytes each); maxGood those remembered for the right
	// secret, which only a holder of it can add to.
	maxFailing = 4096
	maxGood    = 1024
	// logEvery is the most often a refusal is logged; the line counts the
	// refusals since the last.
	logEvery = 10 * time.Second
)

// Checker checks the cluster secret a request presents. The zero value
// is not usable: use NewChecker.
type Checker struct {
	secret  string
	surface string // the metric's label: "node", "api"
	log     *slog.Logger
	m       *metrics.Metrics
	now     func() time.Time

	mu sync.Mutex
	// failing holds the failures' bucket of each address that failed
	// (IPv6 by its /64, what one host is given).
	failing map[netip.Prefix]*rate.Limiter
	// good holds when each address last presented the right secret: when
	// failing is full of live buckets, only these are still checked.
	good map[netip.Prefix]time.Time
	// refused and throttled count the refusals not yet logged.
	refused, throttled int
	loggedAt           time.Time
}

// NewChecker returns a Checker of secret for surface ("node", "api"),
// logging to log and counting in m (either may be nil).
func NewChecker(secret, surface string, log *slog.Logger, m *metrics.Metrics) *Checker {
	if log == nil {
		log = slog.Default()
	}
	return &Checker{secret: secret, surface: surface, log: log, m: m, now: time.Now,
		failing: make(map[netip.Prefix]*rate.Limiter), good: make(map[netip.Prefix]time.Time)}
}

// Check returns nil when presented is the secret; otherwise an
// errdefs.ErrUnauthenticated error, or, for an address over its failures,
// an errdefs.ErrRateLimited one with its RetryAfter — then the secret is
// not compared at all, so a throttled guesser learns nothing, the right
// guess included.
func (c *Checker) Check(r *http.Request, presented string) error {
	addr := source(r.RemoteAddr)
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.failing[addr]
	if b == nil && len(c.failing) >= maxFailing {
		c.prune(now)
	}
	switch {
	case b != nil && b.TokensAt(now) < 1:
		return c.throttle(r, tokenWait(b, now), "this address failed the cluster secret too often")
	case b == nil && len(c.failing) >= maxFailing && !c.isGood(addr):
		// Every slot holds an address failing now: a guesser with more
		// addresses than that is not let past by being new. Addresses that
		// have shown the secret before are still checked.
		return c.throttle(r, time.Second, fmt.Sprintf("over %d addresses are failing the cluster secret", maxFailing))
	}
	if presented != "" && subtle.ConstantTimeCompare([]byte(presented), []byte(c.secret)) == 1 {
		if _, ok := c.good[addr]; !ok && len(c.good) >= maxGood {
			c.forgetOldestGood()
		}
		c.good[addr] = now
		return nil
	}
	if b == nil {
		b = rate.NewLimiter(Rate, Burst)
		if len(c.failing) < maxFailing {
			c.failing[addr] = b
		}
	}
	b.AllowN(now, 1)
	c.m.ClusterSecretRefused(c.surface, metrics.SecretWrong)
	c.refused++
	c.logRefusal(r, now)
	return &errdefs.Error{Kind: errdefs.ErrUnauthenticated, Msg: "no valid cluster secret"}
}

// tokenWait is how long until b holds one token.
func tokenWait(b *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - b.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / float64(b.Limit()) * float64(time.Second))
}

func (c *Checker) throttle(r *http.Request, after time.Duration, why string) error {
	after = max(after, time.Second)
	c.m.ClusterSecretRefused(c.surface, metrics.SecretThrottled)
	c.throttled++
	c.logRefusal(r, c.now())
	return &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: after,
		Msg: fmt.Sprintf("%s: %d failures, then one a second; retry in %s", why, Burst, after.Round(time.Second))}
}

// logRefusal logs at most one line each logEvery, counting what it
// stands for: a guesser must not fill the disk with the log either.
func (c *Checker) logRefusal(r *http.Request, now time.Time) {
	if now.Sub(c.loggedAt) < logEvery {
		return
	}
	c.log.Warn("refused requests without the cluster secret", "surface", c.surface, "refused", c.refused, "throttled", c.throttled,
		"since", c.loggedAt, "last_remote", r.RemoteAddr, "last_method", r.Method, "last_path", r.URL.Path)
	c.refused, c.throttled, c.loggedAt = 0, 0, now
}

// prune forgets the addresses whose bucket has filled again: they are as
// if they had never failed.
func (c *Checker) prune(now time.Time) {
	for a, b := range c.failing {
		if b.TokensAt(now) >= Burst {
			delete(c.failing, a)
		}
	}
}

func (c *Checker) isGood(a netip.Prefix) bool {
	_, ok := c.good[a]
	return ok
}

func (c *Checker) forgetOldestGood() {
	var oldest netip.Prefix
	var at time.Time
	for a, t := range c.good {
		if at.IsZero() || t.Before(at) {
			oldest, at = a, t
		}
	}
	delete(c.good, oldest)
}

// source is the address r came from, an IPv6 one as its /64: a host is
// given a /64, and counting its every address apart would let it guess
// 2^64 times as fast. An address that does not parse (a Unix socket) is
// one source.
func source(remote string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Prefix{}
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p
	}
	return netip.PrefixFrom(a, 32)
}
