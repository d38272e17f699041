package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/netpolicy"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

const testSecret = "0123456789abcdef-test-secret-0123456789abcdef"

// fakeNode is a node.Node whose methods are its fields; a method whose
// field is nil fails as a node would on a call nobody expected.
type fakeNode struct {
	create       func(ctx context.Context, p node.Plan) (node.Sandbox, error)
	fork         func(ctx context.Context, parent string, p node.Plan, n int) ([]node.Sandbox, error)
	kill         func(ctx context.Context, id string) error
	setTimeout   func(ctx context.Context, id string, ms int64) (node.Sandbox, error)
	pause        func(ctx context.Context, id string) (node.Sandbox, error)
	resume       func(ctx context.Context, id string, timeoutMs *int64) (node.Sandbox, error)
	snapshot     func(ctx context.Context, id, snapshotID string) (string, int64, error)
	removeImage  func(ctx context.Context, image string) error
	makeVolume   func(ctx context.Context, id string, size int64) error
	removeVolume func(ctx context.Context, id string) error
	openPort     func(ctx context.Context, id string, port int, resume bool) (agentproxy.Call, error)
	acquire      func(ctx context.Context, id string) (agentproxy.Call, error)
	metrics      func(ctx context.Context, id string) ([]api.SandboxMetric, error)
	network      func(ctx context.Context, id string, p *netpolicy.Policy, cut bool) (node.Sandbox, error)
	networkLog   func(ctx context.Context, id string) ([]egress.Decision, error)
}

func (f *fakeNode) UpdateNetwork(ctx context.Context, id string, p *netpolicy.Policy, cut bool) (node.Sandbox, error) {
	if f.network == nil {
		return node.Sandbox{}, errUnexpected
	}
	return f.network(ctx, id, p, cut)
}

func (f *fakeNode) NetworkLog(ctx context.Context, id string) ([]egress.Decision, error) {
	if f.networkLog == nil {
		return nil, errUnexpected
	}
	return f.networkLog(ctx, id)
}

var _ node.Node = (*fakeNode)(nil)

var errUnexpected = errors.New("fakeNode: call not expected by the test")

func (f *fakeNode) Create(ctx context.Context, p node.Plan) (node.Sandbox, error) {
	if f.create == nil {
		return node.Sandbox{}, errUnexpected
	}
	return f.create(ctx, p)
}

func (f *fakeNode) Fork(ctx context.Context, parent string, p node.Plan, n int) ([]node.Sandbox, error) {
	if f.fork == nil {
		return nil, errUnexpected
	}
	return f.fork(ctx, parent, p, n)
}

func (f *fakeNode) Kill(ctx context.Context, id string) error {
	if f.kill == nil {
		return errUnexpected
	}
	return f.kill(ctx, id)
}

func (f *fakeNode) SetTimeout(ctx context.Context, id string, ms int64) (node.Sandbox, error) {
	if f.setTimeout == nil {
		return node.Sandbox{}, errUnexpected
	}
	return f.setTimeout(ctx, id, ms)
}

func (f *fakeNode) Pause(ctx context.Context, id string) (node.Sandbox, error) {
	if f.pause == nil {
		return node.Sandbox{}, errUnexpected
	}
	return f.pause(ctx, id)
}

func (f *fakeNode) Resume(ctx context.Context, id string, timeoutMs *int64) (node.Sandbox, error) {
	if f.resume == nil {
		return node.Sandbox{}, errUnexpected
	}
	return f.resume(ctx, id, timeoutMs)
}

func (f *fakeNode) Snapshot(ctx context.Context, id, snapshotID string) (string, int64, error) {
	if f.snapshot == nil {
		return "", 0, errUnexpected
	}
	return f.snapshot(ctx, id, snapshotID)
}

func (f *fakeNode) RemoveImage(ctx context.Context, image string) error {
	if f.removeImage == nil {
		return errUnexpected
	}
	return f.removeImage(ctx, image)
}

func (f *fakeNode) MakeVolume(ctx context.Context, id string, size int64) error {
	if f.makeVolume == nil {
		return errUnexpected
	}
	return f.makeVolume(ctx, id, size)
}

func (f *fakeNode) RemoveVolume(ctx context.Context, id string) error {
	if f.removeVolume == nil {
		return errUnexpected
	}
	return f.removeVolume(ctx, id)
}

func (f *fakeNode) OpenPort(ctx context.Context, id string, port int, resume bool) (agentproxy.Call, error) {
	if f.openPort == nil {
		return agentproxy.Call{}, errUnexpected
	}
	return f.openPort(ctx, id, port, resume)
}

func (f *fakeNode) Metrics(ctx context.Context, id string) ([]api.SandboxMetric, error) {
	if f.metrics == nil {
		return nil, errUnexpected
	}
	return f.metrics(ctx, id)
}

func (f *fakeNode) Acquire(ctx context.Context, id string) (agentproxy.Call, error) {
	if f.acquire == nil {
		return agentproxy.Call{}, errUnexpected
	}
	return f.acquire(ctx, id)
}
func (f *fakeNode) Transport() http.RoundTripper { return http.DefaultTransport }
func (f *fakeNode) Subscribe(func(node.Event))   {}

// served is a node served by Handler over HTTP and the Client of it.
type served struct {
	client  *Client
	srv     *httptest.Server
	dataDir string
}

// serve serves n.
func serve(t *testing.T, n node.Node) served {
	t.Helper()
	dir := t.TempDir()
	srv := httptest.NewServer(Handler(HandlerConfig{Node: n, Secret: testSecret, Logger: discard(), DataDir: dir}))
	t.Cleanup(srv.Close)
	return served{client: NewClient("n1", srv.Listener.Addr().String(), NewTransport(testSecret)), srv: srv, dataDir: dir}
}

// filler gives every field a value of its own, recursively, so that a
// field dropped or swapped on the way shows as a difference.
type filler struct{ n int }

func (f *filler) fill(t *testing.T, v reflect.Value) {
	t.Helper()
	f.n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", f.n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.n))
	case reflect.Float64:
		v.SetFloat(float64(f.n) + 0.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(t, p.Elem())
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range s.Len() {
			f.fill(t, s.Index(i))
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		f.fill(t, k)
		f.fill(t, e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[netpolicy.Policy]() {
			// A policy crosses as its rules and is parsed again: fill
			// it with rules that parse, each its own.
			p, err := netpolicy.Parse(netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{fmt.Sprintf("a%d.example.com", f.n), "*.example.org", "203.0.113.0/24"},
				Deny: []string{fmt.Sprintf("d%d.example.com", f.n), "203.0.113.9:22"}, Ports: []int{80, 443, 8000 + f.n},
				Inject: []netpolicy.HeaderRule{{Domain: "api.example.com", Headers: map[string]string{"Authorization": "Bearer {{ secrets.K }}"}}}}, "network")
			if err != nil {
				t.Fatal(err)
			}
			v.Set(reflect.ValueOf(*p))
			return
		}
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(1_800_000_000+int64(f.n), int64(f.n)).UTC()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(t, v.Field(i))
			}
		}
	default:
		t.Fatalf("filler: no value for a %s: teach it one", v.Type())
	}
}

// filledSandbox is a sandbox with every field set.
func (f *filler) sandbox(t *testing.T) node.Sandbox {
	var sb node.Sandbox
	f.fill(t, reflect.ValueOf(&sb).Elem())
	if !sb.Shape.Recorded {
		t.Fatal("filler left Shape.Recorded false")
	}
	return sb
}

// planLocal are node.Plan's fields that do not cross the wire as they
// are, and why. A field added to Plan is carried, or named here.
var planLocal = map[string]string{
	"Build": "a template build boots on the node that builds it, never through this API",
	"HeapDir": "a host directory of the node's own, set only by its template snapshot builder (--share-heap); " +
		"carried, it would let the API name any host directory for a sandbox to mount",
}

// filledPlan is a plan with every field set that crosses the wire.
func (f *filler) plan(t *testing.T) node.Plan {
	var p node.Plan
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		fd := v.Type().Field(i)
		if _, local := planLocal[fd.Name]; fd.IsExported() && !local {
			f.fill(t, v.Field(i))
		}
	}
	return p
}

// TestPlanLocalFields keeps planLocal honest: it names fields Plan has.
func TestPlanLocalFields(t *testing.T) {
	for name := range planLocal {
		if _, ok := reflect.TypeFor[node.Plan]().FieldByName(name); !ok {
			t.Errorf("planLocal names %s, which node.Plan no longer has", name)
		}
	}
}

// TestRoundTrip sends every field of every request and answer of the node
// API through the real client and handler: a field of node.Plan or
// node.Sandbox (its shape included) that does not cross fails it.
func TestRoundTrip(t *testing.T) {
	var f filler
	wantPlan, wantSB := f.plan(t), f.sandbox(t)
	wantSBs := []node.Sandbox{f.sandbox(t), f.sandbox(t)}
	fn := &fakeNode{}
	s := serve(t, fn)
	c := s.client
	ctx := context.Background()
	checkSB := func(call string, got node.Sandbox, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", call, err)
		}
		if !reflect.DeepEqual(got, wantSB) {
			t.Errorf("%s answered\n%+v\nwant\n%+v", call, got, wantSB)
		}
	}
	checkPlan := func(call string, got node.Plan) {
		t.Helper()
		if !reflect.DeepEqual(got, wantPlan) {
			t.Errorf("%s: the node got plan\n%+v\nwant\n%+v", call, got, wantPlan)
		}
	}

	// The API's caller crosses too: the node audits who asked.
	caller := auth.Caller{ProjectID: "p1", KeyID: "key1", SandboxID: "parent-1", Remote: "192.0.2.1:5555"}
	fn.create = func(ctx context.Context, p node.Plan) (node.Sandbox, error) {
		checkPlan("Create", p)
		if got, _ := auth.CallerOf(ctx); got != caller {
			t.Errorf("Create: the node got caller %+v; want %+v", got, caller)
		}
		return wantSB, nil
	}
	got, err := c.Create(auth.WithCaller(ctx, caller), wantPlan)
	checkSB("Create", got, err)

	fn.fork = func(_ context.Context, parent string, p node.Plan, n int) ([]node.Sandbox, error) {
		checkPlan("Fork", p)
		if parent != "parent-1" || n != 2 {
			t.Errorf("Fork(%q, %d); want parent-1, 2", parent, n)
		}
		return wantSBs, nil
	}
	gotSBs, err := c.Fork(ctx, "parent-1", wantPlan, 2)
	if err != nil || !reflect.DeepEqual(gotSBs, wantSBs) {
		t.Errorf("Fork = %+v, %v; want %+v", gotSBs, err, wantSBs)
	}

	fn.setTimeout = func(_ context.Context, id string, ms int64) (node.Sandbox, error) {
		if id != "sb-1" || ms != 60_000 {
			t.Errorf("SetTimeout(%q, %d); want sb-1, 60000", id, ms)
		}
		return wantSB, nil
	}
	got, err = c.SetTimeout(ctx, "sb-1", 60_000)
	checkSB("SetTimeout", got, err)

	wantPolicy := wantPlan.Network
	fn.network = func(_ context.Context, id string, p *netpolicy.Policy, cut bool) (node.Sandbox, error) {
		if id != "sb-1" || !cut || !reflect.DeepEqual(p, wantPolicy) {
			t.Errorf("UpdateNetwork(%q, %+v, %v); want sb-1, %+v, true", id, p, cut, wantPolicy)
		}
		return wantSB, nil
	}
	got, err = c.UpdateNetwork(ctx, "sb-1", wantPolicy, true)
	checkSB("UpdateNetwork", got, err)
	var wantLog []egress.Decision
	for range 2 {
		var d egress.Decision
		f.fill(t, reflect.ValueOf(&d).Elem())
		wantLog = append(wantLog, d)
	}
	fn.networkLog = func(_ context.Context, id string) ([]egress.Decision, error) { return wantLog, nil }
	if gotLog, err := c.NetworkLog(ctx, "sb-1"); err != nil || !reflect.DeepEqual(gotLog, wantLog) {
		t.Errorf("NetworkLog = %+v, %v; want %+v", gotLog, err, wantLog)
	}

	fn.pause = func(_ context.Context, id string) (node.Sandbox, error) {
		if id != "sb-1" {
			t.Errorf("Pause(%q); want sb-1", id)
		}
		return wantSB, nil
	}
	got, err = c.Pause(ctx, "sb-1")
	checkSB("Pause", got, err)

	for _, ms := range []*int64{nil, new(int64(5000))} {
		fn.resume = func(_ context.Context, id string, timeoutMs *int64) (node.Sandbox, error) {
			if id != "sb-1" || !reflect.DeepEqual(timeoutMs, ms) {
				t.Errorf("Resume(%q, %v); want sb-1, %v", id, timeoutMs, ms)
			}
			return wantSB, nil
		}
		got, err = c.Resume(ctx, "sb-1", ms)
		checkSB("Resume", got, err)
	}

	fn.snapshot = func(_ context.Context, id, snapshotID string) (string, int64, error) {
		if id != "sb-1" || snapshotID != "snap-1" {
			t.Errorf("Snapshot(%q, %q); want sb-1, snap-1", id, snapshotID)
		}
		return "/data/snapshots/snap-1", 12345, nil
	}
	if image, size, err := c.Snapshot(ctx, "sb-1", "snap-1"); err != nil || image != "/data/snapshots/snap-1" || size != 12345 {
		t.Errorf("Snapshot = %q, %d, %v; want /data/snapshots/snap-1, 12345", image, size, err)
	}

	var called []string
	fn.kill = func(_ context.Context, id string) error { called = append(called, "kill "+id); return nil }
	fn.removeImage = func(_ context.Context, image string) error { called = append(called, "removeImage "+image); return nil }
	fn.makeVolume = func(_ context.Context, id string, size int64) error {
		called = append(called, fmt.Sprintf("makeVolume %s %d", id, size))
		return nil
	}
	fn.removeVolume = func(_ context.Context, id string) error { called = append(called, "removeVolume "+id); return nil }
	image := filepath.Join(s.dataDir, "snapshots", "snap-1")
	for _, err := range []error{c.Kill(ctx, "sb-1"), c.RemoveImage(ctx, image), c.MakeVolume(ctx, "vol-1", 1<<30), c.RemoveVolume(ctx, "vol-1")} {
		if err != nil {
			t.Error(err)
		}
	}
	want := []string{"kill sb-1", "removeImage " + image, "makeVolume vol-1 1073741824", "removeVolume vol-1"}
	if !reflect.DeepEqual(called, want) {
		t.Errorf("the node was called %q; want %q", called, want)
	}
}

// TestUnrecordedShape: a row from before shapes were recorded arrives so,
// for the API to report its defaults rather than zeros.
func TestUnrecordedShape(t *testing.T) {
	sb := node.Sandbox{ID: "sb-1", ProjectID: "p1", State: "running", CreatedAt: time.Unix(1_800_000_000, 0).UTC()}
	s := serve(t, &fakeNode{pause: func(context.Context, string) (node.Sandbox, error) { return sb, nil }})
	got, err := s.client.Pause(context.Background(), "sb-1")
	if err != nil || !reflect.DeepEqual(got, sb) {
		t.Errorf("Pause = %+v, %v; want %+v", got, err, sb)
	}
}

func TestErrors(t *testing.T) {
	var fail error
	s := serve(t, &fakeNode{pause: func(context.Context, string) (node.Sandbox, error) { return node.Sandbox{}, fail }})
	ctx := context.Background()
	for _, k := range errdefs.Kinds() {
		t.Run(k.Wire, func(t *testing.T) {
			fail = fmt.Errorf("pausing: %w", &errdefs.Error{Kind: k.Err, Msg: "told " + k.Wire, RetryAfter: 1500 * time.Millisecond,
				Cause: errors.New("internal cause")})
			_, err := s.client.Pause(ctx, "sb-1")
			if !errors.Is(err, k.Err) {
				t.Errorf("error %v is not %v across the wire", err, k.Err)
			}
			for _, other := range errdefs.Kinds() {
				if other.Err != k.Err && errors.Is(err, other.Err) {
					t.Errorf("error %v is also %v across the wire", err, other.Err)
				}
			}
			if msg := errdefs.Message(err); msg != "told "+k.Wire {
				t.Errorf("message %q; want %q", msg, "told "+k.Wire)
			}
			if strings.Contains(err.Error(), "internal cause") {
				t.Errorf("error %q carries the node's internal cause", err)
			}
			var e *errdefs.Error
			if !errors.As(err, &e) || e.RetryAfter != 1500*time.Millisecond {
				t.Errorf("error %#v; want a *errdefs.Error with RetryAfter 1.5s", err)
			}
		})
	}
	t.Run("database", func(t *testing.T) {
		// The database's own error, wrapped by no kind: still
		// unavailable, and said so.
		fail = fmt.Errorf("reading sandbox: %w", store.ErrUnavailable)
		_, err := s.client.Pause(ctx, "sb-1")
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "database") {
			t.Errorf("database failure on the node = %v; want ErrUnavailable, saying database", err)
		}
	})
	t.Run("internal", func(t *testing.T) {
		fail = errors.New("secret internal detail")
		_, err := s.client.Pause(ctx, "sb-1")
		for _, k := range errdefs.Kinds() {
			if errors.Is(err, k.Err) {
				t.Errorf("an internal failure arrived as %s", k.Wire)
			}
		}
		if msg := errdefs.Message(err); strings.Contains(msg, "secret") || !strings.Contains(msg, "its log") {
			t.Errorf("internal failure told as %q; want a pointer to the node's log, not the cause", msg)
		}
	})
	t.Run("refused image", func(t *testing.T) {
		// Only the node's own images are removed.
		if err := s.client.RemoveImage(ctx, "/etc/passwd"); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("RemoveImage outside the data directory = %v; want ErrInvalid", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		addr := srv.Listener.Addr().String()
		srv.Close()
		_, err := NewClient("gone", addr, NewTransport(testSecret)).Pause(ctx, "sb-1")
		if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, ErrUnreachable) || !strings.Contains(errdefs.Message(err), "did not answer") {
			t.Errorf("Pause on a node that is down = %v; want ErrUnavailable, ErrUnreachable, saying it did not answer", err)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		_, err := NewClient("n1", s.srv.Listener.Addr().String(), NewTransport("another-secret-0123456789abcdef-0123456789")).Pause(ctx, "sb-1")
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "LIZARD_CLUSTER_SECRET") {
			t.Errorf("Pause with the wrong secret = %v; want ErrUnavailable naming LIZARD_CLUSTER_SECRET", err)
		}
	})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestMetricsRoundTrip: every field of a sample crosses from the node to
// the API unchanged.
func TestMetricsRoundTrip(t *testing.T) {
	var f filler
	var want []api.SandboxMetric
	for range 2 {
		var m api.SandboxMetric
		f.fill(t, reflect.ValueOf(&m).Elem())
		want = append(want, m)
	}
	fn := &fakeNode{metrics: func(_ context.Context, id string) ([]api.SandboxMetric, error) {
		if id != "sb-1" {
			t.Errorf("Metrics(%q); want sb-1", id)
		}
		return want, nil
	}}
	got, err := serve(t, fn).client.Metrics(context.Background(), "sb-1")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Metrics = %+v, %v; want %+v", got, err, want)
	}
}
