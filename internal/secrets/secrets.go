// Package secrets is a project's secret store (docs/secrets.md): named
// values that code in a sandbox may use but never read. A value is sealed
// here with the operator's key before the store (package store) records
// it, is never returned by the API, and is opened only on the node that
// injects it into a request leaving a sandbox (package inject), at the
// moment that request goes out.
//
// Values are sealed with AES-256-GCM from Go's standard library rather
// than age (filippo.io/age): the same process seals and opens with one
// symmetric key, which is exactly an AEAD's job, and it adds no
// dependency; age's recipients, armour and streaming are for files
// shared between people. Each value has a fresh random nonce, and its
// project and name are the additional data, so a sealed value copied to
// another row (another project's, another name's) does not open.
package secrets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/store"
)

// MaxValueBytes bounds a secret's value.
const MaxValueBytes = 64 << 10

// MaxPerProject bounds a project's secrets: with MaxValueBytes each, a
// key setting new names at its 100 requests a second could grow the
// store, on the server's disk, by 6 MB a second without end.
const MaxPerProject = 100

// MaxHosts bounds the hosts a secret names.
const MaxHosts = 100

// Scope is where a secret may be sent. Hosts are names and wildcards
// (*.example.com), matched as a network policy's name rules are
// (package netpolicy); a secret is injected into requests to them alone, so
// that code able to write a policy cannot aim it at a host of its own
// that echoes it back. AllowHTTP lets it go over plain HTTP too, in the
// clear on the wire; without it, only over TLS the node verified.
type Scope struct {
	Hosts     []string
	AllowHTTP bool
}

// CheckHosts returns hosts (the request's field) normalized, or
// ErrInvalid naming the field: at least one is required.
func CheckHosts(field string, hosts []string) ([]string, error) {
	if len(hosts) == 0 {
		return nil, errdefs.Invalidf("%s: give the hosts this secret may be sent to (names or *.wildcards, as network rules name them: "+
			"lizard secret set NAME --host api.openai.com); a secret is injected into requests to them alone", field)
	}
	if len(hosts) > MaxHosts {
		return nil, errdefs.Invalidf("%s: %d hosts, at most %d", field, len(hosts), MaxHosts)
	}
	out := make([]string, 0, len(hosts))
	for i, h := range hosts {
		n, err := netpolicy.ParseHost(h)
		if err != nil {
			return nil, errdefs.Invalidf("%s[%d]: %v", field, i, err)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// nameRE is a secret's name: an identifier, as a policy's header
// template names it ({{ secrets.NAME }}, netpolicy.TemplateSecrets).
var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// CheckName refuses a name that is not an identifier.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return errdefs.Invalidf("secret name %q: want a letter or '_' then up to 127 letters, digits or '_', such as OPENAI_API_KEY", name)
	}
	return nil
}

// CheckValue refuses a value over MaxValueBytes, or one that no HTTP
// header could carry (a secret is only ever sent in one): field names
// the request's field.
func CheckValue(field, value string) error {
	switch {
	case value == "":
		return errdefs.Invalidf("%s is empty: give the secret's value", field)
	case len(value) > MaxValueBytes:
		return errdefs.Invalidf("%s is %d bytes, over the %d bytes (64 KiB) a secret may hold", field, len(value), MaxValueBytes)
	case strings.ContainsAny(value, "\x00\r\n"):
		return errdefs.Invalidf("%s holds a NUL, CR or LF, which no HTTP header value may carry (a trailing newline from a file or echo? strip it)", field)
	}
	return nil
}

// Store keeps projects' secrets in the Lizard store, sealed with Key. It
// is safe for concurrent use.
type Store struct {
	Store *store.Store
	Key   *Key
	// Audit, when set, records uses of a secret (Open): its name, never
	// its value. The first use by a sandbox is a line at once; its further
	// uses within AuditEvery (default DefaultAuditEvery) are one line at
	// that interval's end, with their count. A line per use let code in a
	// sandbox write the node's audit log at its request rate, without bound.
	Audit      *slog.Logger
	AuditEvery time.Duration
	Now        func() time.Time // default time.Now

	// mu guards uses: the uses of a secret by a sandbox counted since its
	// last line, for those used within the last AuditEvery.
	mu   sync.Mutex
	uses map[useKey]*useCount
}

// DefaultAuditEvery is how often a secret's use by one sandbox makes an
// audit line while it goes on.
const DefaultAuditEvery = time.Minute

type useKey struct{ project, secret, sandbox string }

type useCount struct {
	n    int
	host string // the last use's
}

// Info is what may be told of a secret: never its value.
type Info struct {
	Name string
	Scope
	CreatedAt time.Time
	UpdatedAt time.Time
}

func info(s store.Secret) Info {
	return Info{Name: s.Name, Scope: Scope{Hosts: s.Hosts, AllowHTTP: s.AllowHTTP}, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

// errNoKey is the answer of a server that holds no key (a `lizard api`
// or `lizard node` started without --secrets-key-file).
var errNoKey = &errdefs.Error{Kind: errdefs.ErrUnavailable,
	Msg: "this server has no secrets key: its operator must give one (--secrets-key-file or LIZARD_SECRETS_KEY, docs/secrets.md)"}

// Set seals value and records it as projectID's secret name, to be sent
// where sc says, replacing any value and scope it had: requests sent
// after that use the new ones.
func (s *Store) Set(ctx context.Context, projectID, name, value string, sc Scope) (Info, error) {
	if err := CheckName(name); err != nil {
		return Info{}, err
	}
	if err := CheckValue("value", value); err != nil {
		return Info{}, err
	}
	hosts, err := CheckHosts("hosts", sc.Hosts)
	if err != nil {
		return Info{}, err
	}
	if s.Key == nil {
		return Info{}, errNoKey
	}
	if _, err := s.Store.Secrets().Get(ctx, projectID, name); errors.Is(err, store.ErrNotFound) {
		have, err := s.Store.Secrets().List(ctx, projectID)
		if err != nil {
			return Info{}, err
		}
		if len(have) >= MaxPerProject {
			return Info{}, &errdefs.Error{Kind: errdefs.ErrConflict,
				Msg: fmt.Sprintf("project %s has %d secrets, the most allowed; delete one first (or set one it has again)", projectID, MaxPerProject)}
		}
	} else if err != nil {
		return Info{}, err
	}
	now := s.now()
	sealed, err := s.Key.seal([]byte(value), aad(projectID, name))
	if err != nil {
		return Info{}, fmt.Errorf("sealing secret %s: %w", name, err)
	}
	if err := s.Store.Secrets().Put(ctx, store.Secret{ProjectID: projectID, Name: name, KeyID: s.Key.ID(), Sealed: sealed,
		Hosts: hosts, AllowHTTP: sc.AllowHTTP, CreatedAt: now, UpdatedAt: now}); err != nil {
		return Info{}, err
	}
	got, err := s.Store.Secrets().Get(ctx, projectID, name)
	if err != nil {
		return Info{}, err
	}
	return info(got), nil
}

// List returns projectID's secrets by name.
func (s *Store) List(ctx context.Context, projectID string) ([]Info, error) {
	secs, err := s.Store.Secrets().List(ctx, projectID)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(secs))
	for _, sec := range secs {
		out = append(out, info(sec))
	}
	return out, nil
}

// Delete removes projectID's secret name. Requests already sent with it
// are not recalled; later ones that name it fail.
func (s *Store) Delete(ctx context.Context, projectID, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	err := s.Store.Secrets().Delete(ctx, projectID, name)
	if errors.Is(err, store.ErrNotFound) {
		return notFound(projectID, name)
	}
	return err
}

func notFound(projectID, name string) error {
	return &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("secret %s not found in project %s", name, projectID)}
}

// Ref is a secret named by a request: the field that names it (for the
// message), its name, and the domain of the inject rule it is in (a name
// or a wildcard).
type Ref struct {
	Field  string
	Name   string
	Domain string
}

// Check refuses the first ref that is not one of projectID's secrets, or
// whose domain is not within the secret's hosts (ErrInvalid naming its
// field, the secret and the domain): a policy cannot name a secret its
// project does not have, another project's included, nor send one to a
// host it was not set for.
func (s *Store) Check(ctx context.Context, projectID string, refs []Ref) error {
	if len(refs) == 0 {
		return nil
	}
	secs, err := s.Store.Secrets().List(ctx, projectID)
	if err != nil {
		return err
	}
	have := map[string]store.Secret{}
	for _, sec := range secs {
		have[sec.Name] = sec
	}
	for _, r := range refs {
		sec, ok := have[r.Name]
		switch {
		case !ok:
			return errdefs.Invalidf("%s names secret %q, which project %s does not have (set it first: lizard secret set %s --host HOST)", r.Field, r.Name, projectID, r.Name)
		case len(sec.Hosts) == 0:
			return errdefs.Invalidf("%s names secret %q, which was set before secrets named their hosts and may be sent nowhere: "+
				"set it again with its hosts (lizard secret set %s --host %s)", r.Field, r.Name, r.Name, strings.TrimPrefix(r.Domain, "*."))
		case !netpolicy.CoversHost(sec.Hosts, r.Domain):
			return errdefs.Invalidf("%s names secret %q for %s, which is not one of the hosts it may be sent to (%s): "+
				"inject it for those, or set it again with that host (lizard secret set %s --host %s)",
				r.Field, r.Name, r.Domain, strings.Join(sec.Hosts, ", "), r.Name, r.Domain)
		}
	}
	return nil
}

// Use is who opens a secret, and for what: the request's host, and
// whether it goes over plain HTTP.
type Use struct {
	SandboxID string
	Host      string
	Plain     bool
}

// Open returns the value of projectID's secret name, for a request of
// sandbox u.SandboxID to u.Host, and audits the use. It is the one place
// a value is opened, and it checks the secret's scope again at that
// moment (ErrForbidden): a policy checked when it was set may name a
// secret whose hosts were narrowed since.
func (s *Store) Open(ctx context.Context, projectID, name string, u Use) (string, error) {
	if s.Key == nil {
		return "", errNoKey
	}
	sec, err := s.Store.Secrets().Get(ctx, projectID, name)
	if errors.Is(err, store.ErrNotFound) {
		return "", notFound(projectID, name)
	}
	if err != nil {
		return "", err
	}
	if !netpolicy.MatchHost(sec.Hosts, u.Host) {
		return "", &errdefs.Error{Kind: errdefs.ErrForbidden, Msg: fmt.Sprintf("secret %s may not be sent to %s, which is not one of its hosts (set it again with that host to allow it)", name, u.Host)}
	}
	if u.Plain && !sec.AllowHTTP {
		return "", &errdefs.Error{Kind: errdefs.ErrForbidden, Msg: fmt.Sprintf("secret %s may not be sent over plain HTTP (to %s), where anything on the way reads it: use https://, or set the secret again with --allow-http", name, u.Host)}
	}
	v, err := s.Key.open(sec, aad(projectID, name))
	if err != nil {
		return "", err
	}
	s.audit(useKey{projectID, name, u.SandboxID}, u.Host)
	return string(v), nil
}

// audit records a use: a line at once when the secret was not used by the
// sandbox in the last interval, else counted towards the interval's line.
func (s *Store) audit(k useKey, host string) {
	if s.Audit == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.uses[k]; c != nil {
		c.n++
		c.host = host
		return
	}
	if s.uses == nil {
		s.uses = map[useKey]*useCount{}
	}
	s.uses[k] = &useCount{}
	s.logUse(k, 1, host)
	every := s.AuditEvery
	if every <= 0 {
		every = DefaultAuditEvery
	}
	var t *time.Timer
	t = time.AfterFunc(every, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		c := s.uses[k]
		if c.n == 0 {
			delete(s.uses, k)
			return
		}
		s.logUse(k, c.n, c.host)
		s.uses[k] = &useCount{}
		t.Reset(every)
	})
}

func (s *Store) logUse(k useKey, n int, host string) {
	s.Audit.Info("secret.use", "project_id", k.project, "secret", k.secret, "sandbox_id", k.sandbox, "host", host, "count", n)
}

// aad binds a sealed value to its row.
func aad(projectID, name string) []byte {
	return []byte("lizard secret\x00" + projectID + "\x00" + name)
}
