// Package nodetest runs a real node.Local on the shared fake runtime
// (sandboxtest.Fake), with a fake agent, a store and a settable clock: the
// setting of the unit tests of node, control and warm.
package nodetest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/store"
)

// Template is the template every plan of these tests names.
const Template = "interpreter"

// Artifact is what the node's Config.Artifact returns by default.
var Artifact = sandbox.Artifact{Name: Template, Key: "key1", RootFS: "/rootfs"}

// Clock is a settable time source.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Agent is a fake lizard-agent: /health answers Health, /ready 204,
// /reseed records its requests, /execute streams a stdout event and the
// end, /heap/dump answers HeapDump and /heap/wait its share. It counts the
// requests to each path (Requests).
type Agent struct {
	Srv *httptest.Server
	// Health is the status /health answers (default 200).
	Health atomic.Int32
	// HeapRefused makes /heap/wait answer the kernel's refusal (409).
	HeapRefused atomic.Bool

	mu       sync.Mutex
	reseeds  []api.ReseedRequest
	requests map[string]int
}

// Requests is how many requests for path the agent got.
func (a *Agent) Requests(path string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests[path]
}

// HeapDump is what the fake agent's kernel dumps of its heap.
var HeapDump = []byte("the template kernel's heap")

// NewAgent starts a fake agent, closed when t ends.
func NewAgent(t testing.TB) *Agent {
	a := &Agent{requests: map[string]int{}}
	a.Health.Store(http.StatusOK)
	a.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.requests[r.URL.Path]++
		a.mu.Unlock()
		switch r.URL.Path {
		case "/execute":
			w.Header().Set("Content-Type", "application/x-ndjson")
			io.WriteString(w, `{"type":"stdout","text":"2\n"}`+"\n"+`{"type":"end"}`+"\n")
		case "/health":
			w.WriteHeader(int(a.Health.Load()))
			io.WriteString(w, `{"status":"ok"}`)
		case api.AgentReadyPath:
			w.WriteHeader(http.StatusNoContent)
		case api.AgentHeapDumpPath:
			w.Write(HeapDump)
		case api.AgentHeapWaitPath:
			if a.HeapRefused.Load() {
				http.Error(w, "the kernel refused: a thread besides the main one runs Python", http.StatusConflict)
				return
			}
			json.NewEncoder(w).Encode(api.HeapShare{Regions: 1, Bytes: int64(len(HeapDump)), Stored: int64(len(HeapDump))})
		case api.AgentReseedPath:
			var req api.ReseedRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			a.mu.Lock()
			a.reseeds = append(a.reseeds, req)
			a.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.Srv.Close)
	return a
}

// Reseeds returns the /reseed requests for sandbox id so far.
func (a *Agent) Reseeds(id string) []api.ReseedRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []api.ReseedRequest
	for _, r := range a.reseeds {
		if r.SandboxID == id {
			out = append(out, r)
		}
	}
	return out
}

// ReseedCount is how many /reseed requests the agent got.
func (a *Agent) ReseedCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reseeds)
}

// Env is a node on the fake runtime, with projects p1 and p2.
type Env struct {
	Store   *store.Store
	Runtime *sandboxtest.Fake
	Agent   *Agent
	Clock   *Clock
	DataDir string
	Config  node.Config // as the node was made
	Node    *node.Local

	mu     sync.Mutex
	events []node.Event
}

// Discard is a logger that drops everything.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// New makes a node whose sandboxes run on a fake runtime and whose agents
// are all one fake agent. It keeps checkpoint images in a temporary data
// directory; its fake runtime restores only images a checkpoint wrote.
// mutate may change the node's config before the node is made.
func New(t testing.TB, mutate ...func(*node.Config)) *Env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, p := range []string{"p1", "p2"} {
		if err := st.CreateProject(ctx, p, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	e := &Env{Store: st, Runtime: sandboxtest.NewFake(), Agent: NewAgent(t), DataDir: t.TempDir(),
		Clock: &Clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}}
	restore := e.Runtime.RestoreFunc
	e.Runtime.RestoreFunc = func(ctx context.Context, spec sandbox.Spec, dir string) error {
		if _, err := os.Stat(filepath.Join(dir, "image")); err != nil {
			return errors.Join(sandbox.ErrImage, err)
		}
		return restore(ctx, spec, dir)
	}
	pool, err := netns.NewPool(netns.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{
		Runtime:      e.Runtime,
		Store:        st,
		Pool:         pool,
		Logger:       Discard(),
		Artifact:     func(context.Context, string) (sandbox.Artifact, error) { return Artifact, nil },
		Files:        []sandbox.File{{Source: "/host/lizard-agent", Target: node.AgentPath}, {Source: "/host/lizard", Target: node.LizardPath}},
		StartTimeout: 2 * time.Second,
		DataDir:      e.DataDir,
		AgentAddr:    func(string, string) string { return e.Agent.Srv.Listener.Addr().String() },
		Now:          e.Clock.Now,
	}
	for _, f := range mutate {
		f(&cfg)
	}
	e.Config = cfg
	e.Node = e.NewNode(t)
	return e
}

// NewNode makes another node of the env's config, as a server restart
// would; it records its events with the first's.
func (e *Env) NewNode(t testing.TB) *node.Local {
	t.Helper()
	n, err := node.New(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	n.Subscribe(func(ev node.Event) {
		e.mu.Lock()
		e.events = append(e.events, ev)
		e.mu.Unlock()
	})
	return n
}

// Events returns the Started and Stopped events of sandbox id so far;
// AllEvents every event, the audit trail's too.
func (e *Env) Events(id string) []node.Event {
	var out []node.Event
	for _, ev := range e.AllEvents(id) {
		if ev.Kind == node.Started || ev.Kind == node.Stopped {
			out = append(out, ev)
		}
	}
	return out
}

func (e *Env) AllEvents(id string) []node.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []node.Event
	for _, ev := range e.events {
		if ev.SandboxID == id {
			out = append(out, ev)
		}
	}
	return out
}

// Plan is a plan for a sandbox of project p1 from Template, with timeoutMs.
func Plan(timeoutMs int64) node.Plan {
	return node.Plan{ProjectID: "p1", Template: Template, TimeoutMs: timeoutMs}
}

// Create makes a sandbox of plan p, failing the test if it cannot.
func (e *Env) Create(t testing.TB, p node.Plan) node.Sandbox {
	t.Helper()
	sb, err := e.Node.Create(context.Background(), p)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return sb
}

// Row reads sandbox id's row.
func (e *Env) Row(t testing.TB, id string) store.Sandbox {
	t.Helper()
	sb, err := e.Store.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatalf("GetSandbox(%s): %v", id, err)
	}
	return sb
}

// Image is where a paused sandbox id's checkpoint image is kept.
func (e *Env) Image(id string) string { return filepath.Join(e.DataDir, "images", id) }

// Exists reports whether path exists.
func Exists(path string) bool { _, err := os.Stat(path); return err == nil }

// WaitFor polls cond for up to 5 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
