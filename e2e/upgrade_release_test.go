package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/daemon"
	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/lizard-build/lizard/internal/version"
)

// upgradeFrom is the release TestUpgrade upgrades from: 0.1.0, the first
// numbered one (7db32ba, 2026-12-04), which has every kind of state the test
// keeps. A fixed commit, so that the test means the same in every clone; move
// it to the previous release when one is cut.
const (
	upgradeFrom        = "7db32ba295fffe7518e9e782780ae0ed45a7ff43"
	upgradeFromVersion = "0.1.0"
)

// buildAt builds lizard, lizard-agent and lizard-client of commit, taken
// from the clone's history, as the Makefile builds them (static, -trimpath),
// and returns the directory holding them: .cache/build/COMMIT-GOVERSION of
// the repository (git-ignored), built once — TestUpgrade,
// TestUpgradeCluster and TestUpgradeMixedCluster take the same binaries,
// in this run and the next, instead of each linking its own. A fixed
// commit built by one Go release makes the same binaries, so keeping them
// changes nothing the tests see.
func buildAt(t *testing.T, commit string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	dir := filepath.Join(testenv.RepoRoot(t), ".cache", "build", commit[:12]+"-"+runtime.Version())
	if _, err := os.Stat(filepath.Join(dir, "lizard-client")); err == nil {
		t.Logf("Lizard %s: the build in %s", commit[:7], dir)
		return dir
	}
	src := testenv.SourceAt(t, commit)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building Lizard %s needs go on PATH: %v", commit[:7], err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// Built beside and renamed into place: a build cut short leaves no
	// directory a later run would take for a whole one.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	begin := time.Now()
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", tmp+"/", "./cmd/lizard", "./cmd/lizard-agent", "./cmd/lizard-client")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building Lizard %s: %v\n%s", commit[:7], err, out)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "lizard-client")); serr == nil {
			return dir // another test process kept the same build first
		}
		t.Fatalf("keeping the build of Lizard %s: %v", commit[:7], err)
	}
	t.Logf("built Lizard %s in %s into %s", commit[:7], time.Since(begin).Round(time.Millisecond), dir)
	return dir
}

// buildMu makes buildAt's callers in this process wait for one build.
var buildMu sync.Mutex

// hookLog is a webhook receiver counting the deliveries of each event type.
type hookLog struct {
	mu    sync.Mutex
	types map[string]int
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev api.Event
	b, _ := io.ReadAll(r.Body)
	if json.Unmarshal(b, &ev) == nil {
		h.mu.Lock()
		h.types[ev.Type]++
		h.mu.Unlock()
	}
}

func (h *hookLog) count(typ string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.types[typ]
}

// TestUpgrade: the previous release (upgradeFrom, built from this clone's
// history) serves a data directory and an image store — a project, a second
// key, a secret, a webhook, a volume written by a sandbox that is then paused
// holding a Python variable, a snapshot of another sandbox paused into the
// image store, a template built
// from a one-step recipe, and a sandbox left running — and is stopped; this
// build starts on the same data directory and image store. A paused
// sandbox's memory needs the agent it was paused with (0.1.0's images record
// none): refused with a 409 until that agent is kept where the upgrade note
// says, then everything is there: both keys work, the paused sandbox resumes with its variable and its
// volume's file, the running one still answers, the snapshot restores, the
// template creates, the secret and the webhook are listed and the webhook
// gets this build's events.
func TestUpgrade(t *testing.T) {
	testenv.RequiresRoot(t)
	old := buildAt(t, upgradeFrom)
	ctx := context.Background()
	hooks := &hookLog{types: map[string]int{}}
	rcv := httptest.NewServer(hooks)
	t.Cleanup(rcv.Close)
	// The image store is a directory (file://): the same format as a
	// bucket's, without a server to start.
	args := []string{"--image-store", "file://" + t.TempDir(), "--webhook-allow-private"}
	s := startServerBin(t, filepath.Join(old, "lizard"), t.TempDir(), append(args, "--runsc", testenv.Binary(t, "runsc"))...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's log (%s, then this build):\n%s", upgradeFromVersion, tail(s.logs(), 60))
		}
	})
	if v := healthVersion(t, s.url); v != upgradeFromVersion {
		t.Fatalf("the earlier build serves version %q; want %s", v, upgradeFromVersion)
	}

	c := s.createProject("proj_upgrade")
	out, err := exec.Command(s.bin, "admin", "create-key", "--data-dir", s.dataDir, "--project", "proj_upgrade", "--json").Output()
	if err != nil {
		t.Fatalf("admin create-key of %s: %v", upgradeFromVersion, err)
	}
	var k struct{ APIKey string }
	if err := json.Unmarshal(out, &k); err != nil || !strings.HasPrefix(k.APIKey, "lz_") {
		t.Fatalf("admin create-key printed %q (%v); want a lz_ key", out, err)
	}
	c2 := s.client(k.APIKey)
	if _, err := c.Secrets().Set(ctx, "TOKEN", api.SetSecretRequest{Value: "s3cret", Hosts: []string{"api.example.com"}}); err != nil {
		t.Fatalf("Secrets().Set: %v", err)
	}
	hook, err := c.Webhooks().Create(ctx, api.CreateWebhookRequest{URL: rcv.URL + "/hook"})
	if err != nil {
		t.Fatalf("Webhooks().Create: %v", err)
	}
	if _, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: "data", SizeMb: 32}); err != nil {
		t.Fatalf("Volumes().Create: %v", err)
	}

	// The paused sandbox: a variable and a file on its volume (its image
	// stays on disk, beside the volume).
	a := newSandbox(t, c, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "data", Path: "/home/user/data"}}})
	py(t, c, a.SandboxID, "x = 42\nopen('/home/user/data/kept.txt', 'w').write('written by "+upgradeFromVersion+"')")
	if _, err := c.PauseSandbox(ctx, a.SandboxID); err != nil {
		t.Fatalf("pausing: %v", err)
	}
	// The snapshot, of a sandbox then paused with its image durable in
	// the image store.
	b := newSandbox(t, c, api.CreateSandboxRequest{})
	py(t, c, b.SandboxID, "y = 7")
	snap, err := c.Snapshot(ctx, b.SandboxID)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	py(t, c, b.SandboxID, "y = 8")
	if p, err := c.PauseSandboxWith(ctx, b.SandboxID, api.PauseRequest{WaitDurable: true}); err != nil || !p.Durable {
		t.Fatalf("pausing into the image store: %+v, %v", p, err)
	}
	// The template: one step, with a nonce, so that its build is this
	// run's own in the shared cache and its deletion touches no other's.
	nonce := make([]byte, 6)
	rand.Read(nonce)
	tplName := "upgrade-tpl"
	if _, _, _, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: tplName, Recipe: api.TemplateRecipe{
		Env: map[string]string{"UPGRADE_NONCE": hex.EncodeToString(nonce)},
		Run: []api.TemplateCommand{{Cmd: "echo built by " + upgradeFromVersion + " > /home/user/built.txt", User: "user"}},
	}}); err != nil {
		t.Fatalf("building the template on %s: %v\n%s", upgradeFromVersion, err, tail(s.logs(), 30))
	}
	// Deleted at the end, after its sandboxes (cleanups run last first).
	t.Cleanup(func() {
		if err := c.Templates().Delete(context.Background(), tplName); err != nil {
			t.Errorf("deleting the template: %v", err)
		}
	})
	// The sandbox left running across the upgrade.
	r := newSandbox(t, c, api.CreateSandboxRequest{})
	py(t, c, r.SandboxID, "z = 5")

	s.stop()
	begin := time.Now()
	s.bin = testenv.Binary(t, "lizard")
	s.args = args
	s.start()
	t.Logf("%s stopped; this build serving its data directory %s later", upgradeFromVersion, time.Since(begin).Round(time.Millisecond))
	hooksBefore := hooks.count(api.LifecycleCreated)

	if sb, err := c2.GetSandbox(ctx, a.SandboxID); err != nil || sb.State != api.StatePaused {
		t.Fatalf("the paused sandbox, read with the key create-key made: %+v, %v; want paused", sb, err)
	}
	// 0.1.0's images record no agent, and its memory runs only on its
	// own agent's code: without it the resume is refused, saying where to
	// put it, and the sandbox stays paused with its image.
	keptAgent := filepath.Join(s.dataDir, daemon.UnrecordedAgent)
	_, err = c.ResumeSandbox(ctx, a.SandboxID, api.ResumeRequest{})
	if !isStatus(err, http.StatusConflict) || !strings.Contains(err.Error(), keptAgent) {
		t.Fatalf("resuming a sandbox %s paused, without its agent kept = %v; want 409 naming %s", upgradeFromVersion, err, keptAgent)
	}
	if sb, err := c.GetSandbox(ctx, a.SandboxID); err != nil || sb.State != api.StatePaused {
		t.Fatalf("after the refused resume: %+v, %v; want paused", sb, err)
	}
	// The upgrade note's step (CHANGELOG.md): the previous agent kept.
	if out, err := exec.Command("install", "-D", "-m", "0755", filepath.Join(old, "lizard-agent"), keptAgent).CombinedOutput(); err != nil {
		t.Fatalf("keeping %s's agent: %v %s", upgradeFromVersion, err, out)
	}
	if got := py(t, c, a.SandboxID, "print(x)"); got != "42" {
		t.Errorf("x after the upgrade = %q; want 42", got)
	}
	if got := py(t, c2, a.SandboxID, "print(open('/home/user/data/kept.txt').read())"); got != "written by "+upgradeFromVersion {
		t.Errorf("the volume's file after the upgrade = %q", got)
	}
	if got := py(t, c, r.SandboxID, "print(z)"); got != "5" {
		t.Errorf("z in the sandbox running across the upgrade = %q; want 5", got)
	}
	if got := py(t, c, b.SandboxID, "print(y)"); got != "8" {
		t.Errorf("y in the sandbox paused into the image store = %q; want 8", got)
	}
	fromSnap := newSandbox(t, c, api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
	if got := py(t, c, fromSnap.SandboxID, "print(y)"); got != "7" {
		t.Errorf("y in a sandbox of the snapshot taken by %s = %q; want 7", upgradeFromVersion, got)
	}
	fromTpl := newSandbox(t, c, api.CreateSandboxRequest{Template: tplName})
	if got := py(t, c, fromTpl.SandboxID, "print(open('/home/user/built.txt').read().strip())"); got != "built by "+upgradeFromVersion {
		t.Errorf("the template's file in a sandbox created after the upgrade = %q", got)
	}
	if ss, err := c.Secrets().List(ctx); err != nil || len(ss) != 1 || ss[0].Name != "TOKEN" {
		t.Errorf("secrets after the upgrade = %+v, %v; want TOKEN", ss, err)
	}
	if ws, err := c.Webhooks().List(ctx); err != nil || len(ws) != 1 || ws[0].WebhookID != hook.WebhookID || ws[0].URL != hook.URL {
		t.Errorf("webhooks after the upgrade = %+v, %v; want %s", ws, err, hook.WebhookID)
	}
	// The webhook gets this build's events: the two creates above.
	deadline := time.Now().Add(30 * time.Second)
	for hooks.count(api.LifecycleCreated) < hooksBefore+2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := hooks.count(api.LifecycleCreated) - hooksBefore; got < 2 {
		t.Errorf("the webhook registered with %s got %d created events from this build; want 2", upgradeFromVersion, got)
	}
}

// healthVersion is the version GET /v1/health names.
func healthVersion(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct{ Version string }
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("GET /v1/health: %v", err)
	}
	return h.Version
}

// TestUpgradeCluster is TestUpgrade on PostgreSQL, rolled as docs/cluster.md
// says, one process at a time: a cluster of the previous release (one
// `lizard node`, one `lizard api`) holds a second key, a secret, a webhook,
// a sandbox paused with a Python variable and a snapshot; this build's api
// replaces the old one on the same database (migrating its schema) and
// works with the old node — listed compatible (it registers no version:
// 0.1.0), the paused sandbox resumed there through the new api — then the
// node is replaced by this build on the same data directory, with the old
// agent kept as the upgrade note says: the sandbox, paused again, resumes
// with its variable, the snapshot restores, the keys work, the secret and
// the webhook are listed.
func TestUpgradeCluster(t *testing.T) {
	testenv.RequiresRoot(t)
	old := buildAt(t, upgradeFrom)
	oldBin, newBin := filepath.Join(old, "lizard"), testenv.Binary(t, "lizard")
	key := make([]byte, 32)
	rand.Read(key)
	c, cl := startClusterBin(t, oldBin, 1, 1, []string{"LIZARD_SECRETS_KEY=" + base64.StdEncoding.EncodeToString(key)}, []string{"--runsc", testenv.Binary(t, "runsc")}, []string{"--webhook-allow-private"})
	ctx := context.Background()
	p1 := cl[0]
	cmd := exec.Command(oldBin, "admin", "create-key", "--project", "p1", "--json")
	cmd.Env = append(os.Environ(), "LIZARD_DATABASE_URL="+c.dbURL)
	out, err := cmd.Output()
	var k struct{ APIKey string }
	if err != nil || json.Unmarshal(out, &k) != nil || !strings.HasPrefix(k.APIKey, "lz_") {
		t.Fatalf("admin create-key of %s: %s, %v", upgradeFromVersion, out, err)
	}
	if _, err := p1.Secrets().Set(ctx, "TOKEN", api.SetSecretRequest{Value: "s3cret", Hosts: []string{"api.example.com"}}); err != nil {
		t.Fatalf("Secrets().Set: %v", err)
	}
	hook, err := p1.Webhooks().Create(ctx, api.CreateWebhookRequest{URL: "http://127.0.0.1:9/hook"})
	if err != nil {
		t.Fatalf("Webhooks().Create: %v", err)
	}
	a := newSandbox(t, p1, api.CreateSandboxRequest{})
	py(t, p1, a.SandboxID, "x = 42")
	if _, err := p1.PauseSandbox(ctx, a.SandboxID); err != nil {
		t.Fatalf("pausing: %v", err)
	}
	b := newSandbox(t, p1, api.CreateSandboxRequest{})
	py(t, p1, b.SandboxID, "y = 7")
	snap, err := p1.Snapshot(ctx, b.SandboxID)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := p1.KillSandbox(ctx, b.SandboxID); err != nil {
		t.Fatal(err)
	}

	// The api first: this build's, beside the old node.
	ap := c.apis[0]
	ap.stop()
	ap.bin = newBin
	ap.start()
	if v := healthVersion(t, ap.url); v != version.Version {
		t.Fatalf("the new api serves %q; want %s", v, version.Version)
	}
	admin := c.apis[0]
	nodes, err := clientFor(t, admin.url, c.secret).ListNodes(ctx)
	if err != nil || len(nodes.Nodes) != 1 || !nodes.Nodes[0].Compatible || !nodes.Nodes[0].Live {
		t.Fatalf("GET /v1/nodes from this build's api = %+v, %v; want the %s node, compatible and live", nodes, err, upgradeFromVersion)
	}
	p2 := clientFor(t, ap.url, k.APIKey)
	if got := py(t, p2, a.SandboxID, "print(x)"); got != "42" {
		t.Errorf("x through this build's api on the %s node = %q; want 42", upgradeFromVersion, got)
	}
	if _, err := p2.PauseSandbox(ctx, a.SandboxID); err != nil {
		t.Fatalf("pausing on the %s node through this build's api: %v", upgradeFromVersion, err)
	}

	// Then the node, with its agent kept for the images it made.
	n1 := c.node("n1")
	n1.stop()
	keptAgent := filepath.Join(n1.dataDir, daemon.UnrecordedAgent)
	if out, err := exec.Command("install", "-D", "-m", "0755", filepath.Join(old, "lizard-agent"), keptAgent).CombinedOutput(); err != nil {
		t.Fatalf("keeping %s's agent: %v %s", upgradeFromVersion, err, out)
	}
	n1.bin = newBin
	n1.start()
	if got := py(t, p2, a.SandboxID, "print(x)"); got != "42" {
		t.Errorf("x on this build's node = %q; want 42", got)
	}
	fromSnap := newSandbox(t, p2, api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
	if got := py(t, clientFor(t, ap.url, c.key), fromSnap.SandboxID, "print(y)"); got != "7" {
		t.Errorf("y in a sandbox of the snapshot %s took = %q; want 7", upgradeFromVersion, got)
	}
	if ss, err := p2.Secrets().List(ctx); err != nil || len(ss) != 1 || ss[0].Name != "TOKEN" {
		t.Errorf("secrets after the upgrade = %+v, %v; want TOKEN", ss, err)
	}
	if ws, err := p2.Webhooks().List(ctx); err != nil || len(ws) != 1 || ws[0].WebhookID != hook.WebhookID {
		t.Errorf("webhooks after the upgrade = %+v, %v; want %s", ws, err, hook.WebhookID)
	}
}

func clientFor(t *testing.T, url, key string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: url, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
