package node_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
	"github.com/lizard-build/lizard/internal/imagestore/s3"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/testenv"
)

// imageBackends are the image stores the node's durability runs against;
// stop and start (S3 only) take the store away and bring it back.
var imageBackends = []struct {
	name string
	open func(t *testing.T) (b imagestore.Bucket, stop, start func())
}{
	{"disk", func(t *testing.T) (imagestore.Bucket, func(), func()) {
		return &disk.Bucket{Root: t.TempDir()}, nil, nil
	}},
	{"s3", func(t *testing.T) (imagestore.Bucket, func(), func()) {
		srv := testenv.S3Server(t)
		u, _ := url.Parse("s3://" + srv.Bucket + "/lizard")
		b, err := s3.Open(u, srv.Getenv)
		if err != nil {
			t.Fatal(err)
		}
		return b, srv.Stop, srv.Start
	}},
}

// imageKey seals the tests' images, the same on every node as the
// operator's secrets key is; otherImageKey is another cluster's.
var imageKey, otherImageKey = newImageKey(), newImageKey()

func newImageKey() *imagestore.Key {
	secret := make([]byte, 32)
	rand.Read(secret)
	k, err := imagestore.NewKey(secret)
	if err != nil {
		panic(err)
	}
	return k
}

// withImages gives a node the image store over b and a cache of its own
// in cache.
func withImages(t *testing.T, b imagestore.Bucket, cache string) func(*node.Config) {
	return withImagesKey(t, b, cache, imageKey)
}

func withImagesKey(t *testing.T, b imagestore.Bucket, cache string, key *imagestore.Key) func(*node.Config) {
	return func(cfg *node.Config) {
		cfg.Images = imagestore.New(b, key)
		c, err := imagestore.NewCache(cfg.Images, cache, 1<<30, nodetest.Discard())
		if err != nil {
			t.Fatal(err)
		}
		cfg.ImageCache = c
	}
}

// otherNode is a second node on env's database and image store with a disk
// of its own: what resumes a sandbox paused on a lost node.
func otherNode(t *testing.T, e *nodetest.Env, b imagestore.Bucket) other {
	cfg := e.Config
	cfg.DataDir = t.TempDir()
	cache := filepath.Join(cfg.DataDir, "image-cache")
	withImages(t, b, cache)(&cfg)
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return other{node: n, cache: cache}
}

type other struct {
	node  *node.Local
	cache string
}

func waitDurable(t *testing.T, e *nodetest.Env, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !e.Row(t, id).Durable {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s not durable after %s", id, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runUploader(t *testing.T, n *node.Local) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.RunUploader(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// A pause answers before its image is durable; the uploader makes it so;
// another node, whose disk lacks the image, resumes it from the store.
func TestPauseDurableResumesElsewhere(t *testing.T) {
	for _, be := range imageBackends {
		t.Run(be.name, func(t *testing.T) {
			b, _, _ := be.open(t)
			e := nodetest.New(t, withImages(t, b, t.TempDir()))
			ctx := context.Background()
			sb := e.Create(t, nodetest.Plan(60_000))
			if p := pause(t, e, sb.ID); p.Durable {
				t.Fatal("a pause with an image store is durable before any upload")
			}
			runUploader(t, e.Node)
			waitDurable(t, e, sb.ID, 20*time.Second)

			other := otherNode(t, e, b)
			r, err := other.node.Resume(ctx, sb.ID, nil)
			if err != nil {
				t.Fatalf("Resume on another node: %v", err)
			}
			rs := e.Runtime.Restores()
			last := rs[len(rs)-1].Dir
			if r.State != api.StateRunning || !strings.HasPrefix(last, other.cache) {
				t.Fatalf("resumed %s from %s; want running, restored from the other node's image cache %s", r.State, last, other.cache)
			}
			if e.Row(t, sb.ID).Durable {
				t.Fatal("a running sandbox reports durable")
			}
		})
	}
}

// An image changed in the store is refused before the runtime reads a
// byte of it: the resume ends the sandbox failed with a typed error naming
// the image and why, a sandbox.failed event (Stopped, failed), a count in
// lizard_images_rejected_total, and nothing restored.
func TestTamperedImageRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, b imagestore.Bucket, image string, m imagestore.Manifest)
		reason string
		says   string
	}{
		{"flipped byte", func(t *testing.T, b imagestore.Bucket, _ string, m imagestore.Manifest) {
			data := readObject(t, b, m.Object)
			data[len(data)/3] ^= 0x55
			putObject(t, b, m.Object, data)
		}, "tampered", "failed its authentication"},
		{"object rewritten, manifest recomputed", func(t *testing.T, b imagestore.Bucket, image string, m imagestore.Manifest) {
			// What the red-team did: their own tar, and a manifest of
			// its SHA-256 as Lizard wrote before images were sealed.
			tarData := readObject(t, b, m.Object)
			sum := sha256.Sum256(tarData)
			body, _ := json.Marshal(map[string]any{"object": m.Object, "sha256": hex.EncodeToString(sum[:]), "size": len(tarData)})
			putObject(t, b, image+"/manifest.json", body)
		}, "unsealed", "stored unsealed"},
		{"sealed with another key", func(t *testing.T, b imagestore.Bucket, image string, _ imagestore.Manifest) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte("attacker's state"), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := imagestore.New(b, otherImageKey).Put(context.Background(), image, dir); err != nil {
				t.Fatal(err)
			}
		}, "wrong_key", "sealed with another key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, be := range imageBackends {
				t.Run(be.name, func(t *testing.T) {
					b, _, _ := be.open(t)
					e := nodetest.New(t, withImages(t, b, t.TempDir()))
					ctx := context.Background()
					sb := e.Create(t, nodetest.Plan(60_000))
					pause(t, e, sb.ID)
					runUploader(t, e.Node)
					waitDurable(t, e, sb.ID, 20*time.Second)
					image := node.PausedImage(sb.ID)
					m, err := e.Config.Images.Stat(ctx, image)
					if err != nil {
						t.Fatal(err)
					}
					tc.tamper(t, b, image, m)

					cfg := e.Config
					cfg.DataDir = t.TempDir()
					cfg.Metrics = metrics.New()
					withImages(t, b, filepath.Join(cfg.DataDir, "image-cache"))(&cfg)
					other, err := node.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					var stops []node.Event
					other.Subscribe(func(ev node.Event) {
						if ev.Kind == node.Stopped && ev.SandboxID == sb.ID {
							stops = append(stops, ev)
						}
					})
					restores := len(e.Runtime.Restores())
					_, err = other.Resume(ctx, sb.ID, nil)
					if !errors.Is(err, errdefs.ErrGone) || !errors.Is(err, imagestore.ErrTampered) ||
						!strings.Contains(errdefs.Message(err), image) || !strings.Contains(errdefs.Message(err), tc.says) {
						t.Fatalf("Resume from a %s image: %v (%q); want ErrGone, ErrTampered, naming %s and saying %q", tc.name, err, errdefs.Message(err), image, tc.says)
					}
					if got := len(e.Runtime.Restores()); got != restores {
						t.Fatalf("the runtime restored %d images after the refusal; want none", got-restores)
					}
					if ents, _ := os.ReadDir(filepath.Join(cfg.DataDir, "image-cache")); len(ents) != 0 {
						t.Fatalf("the refused image left %v in the cache", ents)
					}
					if row := e.Row(t, sb.ID); row.Live() || row.State != api.StateFailed || !strings.Contains(row.EndReason, image) {
						t.Fatalf("after a refused image the sandbox is %s (%q, live %v); want failed naming the image", row.State, row.EndReason, row.Live())
					}
					if len(stops) != 1 || stops[0].State != api.StateFailed || !strings.Contains(stops[0].Reason, tc.says) {
						t.Fatalf("events %+v; want one Stopped, failed, saying %q", stops, tc.says)
					}
					if n := metricsCounter(t, cfg.Metrics, tc.reason); n != 1 {
						t.Fatalf("lizard_images_rejected_total{reason=%q} = %v, want 1", tc.reason, n)
					}
				})
			}
		})
	}
}

// metricsCounter reads lizard_images_rejected_total{reason} of m.
func metricsCounter(t *testing.T, m *metrics.Metrics, reason string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lizard_images_rejected_total" {
			continue
		}
		for _, c := range mf.GetMetric() {
			for _, l := range c.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return c.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// An image a Lizard from before sealing stored is sealed again by the
// node whose disk holds it when that node starts (its uploader), and
// then resumes elsewhere.
func TestUnsealedImageResealed(t *testing.T) {
	b := &disk.Bucket{Root: t.TempDir()}
	e := nodetest.New(t, withImages(t, b, t.TempDir()))
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(60_000))
	pause(t, e, sb.ID)
	runUploader(t, e.Node)
	waitDurable(t, e, sb.ID, 20*time.Second)
	image := node.PausedImage(sb.ID)
	m, err := e.Config.Images.Stat(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	old := []byte("a tar from before")
	sum := sha256.Sum256(old)
	putObject(t, b, m.Object, old)
	body, _ := json.Marshal(map[string]any{"object": m.Object, "sha256": hex.EncodeToString(sum[:]), "size": len(old)})
	putObject(t, b, image+"/manifest.json", body)
	if _, err := e.Config.Images.Stat(ctx, image); !errors.Is(err, imagestore.ErrUnsealed) {
		t.Fatalf("Stat of the old image: %v; want ErrUnsealed", err)
	}

	runUploader(t, e.Node) // as the node's start does
	deadline := time.Now().Add(20 * time.Second)
	for _, err := e.Config.Images.Stat(ctx, image); err != nil; _, err = e.Config.Images.Stat(ctx, image) {
		if time.Now().After(deadline) {
			t.Fatalf("the unsealed image was not sealed again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	other := otherNode(t, e, b)
	if r, err := other.node.Resume(ctx, sb.ID, nil); err != nil || r.State != api.StateRunning {
		t.Fatalf("Resume elsewhere of the sealed-again image: %s, %v", r.State, err)
	}
}

func readObject(t *testing.T, b imagestore.Bucket, key string) []byte {
	t.Helper()
	rc, err := b.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func putObject(t *testing.T, b imagestore.Bucket, key string, data []byte) {
	t.Helper()
	if err := b.Put(context.Background(), key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// With the store away a pause still answers, not durable, and a resume
// elsewhere is refused as unavailable, the sandbox kept paused; once the
// store is back durability catches up.
func TestStoreAwayThenBack(t *testing.T) {
	b, stop, start := imageBackends[1].open(t)
	e := nodetest.New(t, withImages(t, b, t.TempDir()))
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(60_000))
	stop()
	if p := pause(t, e, sb.ID); p.State != api.StatePaused || p.Durable {
		t.Fatalf("pause with the store away = %s durable %v; want paused, not durable", p.State, p.Durable)
	}
	runUploader(t, e.Node)
	time.Sleep(node.UploadInterval + time.Second)
	if e.Row(t, sb.ID).Durable {
		t.Fatal("durable while the store is away")
	}
	other := otherNode(t, e, b)
	if _, err := other.node.Resume(ctx, sb.ID, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("resume elsewhere of a pause not durable: %v; want ErrUnavailable", err)
	}
	if row := e.Row(t, sb.ID); row.State != api.StatePaused {
		t.Fatalf("sandbox %s after a refused resume; want paused", row.State)
	}
	start()
	waitDurable(t, e, sb.ID, 30*time.Second)
	stop()
	if _, err := other.node.Resume(ctx, sb.ID, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("resume elsewhere with the store away: %v; want ErrUnavailable", err)
	}
	if row := e.Row(t, sb.ID); row.State != api.StatePaused || !row.Live() {
		t.Fatalf("sandbox %s after the store was away; want still paused", row.State)
	}
	start()
	if r, err := other.node.Resume(ctx, sb.ID, nil); err != nil || r.State != api.StateRunning {
		t.Fatalf("resume once the store is back: %v, %v", r.State, err)
	}
}

// A node refuses to act on a sandbox moved to another node while it was
// lost: an API process that remembered the sandbox here is told to retry.
func TestMovedSandboxRefused(t *testing.T) {
	e := nodetest.New(t, func(cfg *node.Config) { cfg.Store = cfg.Store.OnNode("n1") })
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(60_000))
	pause(t, e, sb.ID)
	if err := e.Store.AdoptPaused(ctx, sb.ID, "n1", "n2"); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Resume": func() error { _, err := e.Node.Resume(ctx, sb.ID, nil); return err },
		"Kill":   func() error { return e.Node.Kill(ctx, sb.ID) },
		"Pause":  func() error { _, err := e.Node.Pause(ctx, sb.ID); return err },
	} {
		if err := call(); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "runs on node n2") {
			t.Errorf("%s of a sandbox moved to n2: %v; want ErrUnavailable naming n2", name, err)
		}
	}
	if row := e.Row(t, sb.ID); !row.Live() || row.State != api.StatePaused {
		t.Fatalf("the moved sandbox is %s (live %v); want left paused for n2", row.State, row.Live())
	}
}

// TestImageWithLinkReportedLost: whoever can write the image store can
// put a paused sandbox's image there with a manifest that matches it. One
// holding a link (its agent secret file or its pages naming a host file)
// is reported lost, never restored nor read.
func TestImageWithLinkReportedLost(t *testing.T) {
	b := &disk.Bucket{Root: t.TempDir()}
	e := nodetest.New(t, withImages(t, b, t.TempDir()))
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(60_000))
	pause(t, e, sb.ID)
	runUploader(t, e.Node)
	waitDurable(t, e, sb.ID, 20*time.Second)
	victim := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(victim, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The sandbox's own image, with a link added.
	evil := t.TempDir()
	if out, err := exec.Command("cp", "-a", filepath.Join(e.Config.DataDir, "images", sb.ID)+"/.", evil+"/").CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	if err := os.Symlink(victim, filepath.Join(evil, "pages.img")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Config.Images.Put(ctx, "paused/"+sb.ID, evil); err != nil {
		t.Fatal(err)
	}
	restores := len(e.Runtime.Restores())
	other := otherNode(t, e, b)
	_, err := other.node.Resume(ctx, sb.ID, nil)
	if !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "lost from the image store") {
		t.Fatalf("Resume from an image holding a link: %v; want ErrGone saying the image was lost", err)
	}
	if got := len(e.Runtime.Restores()); got != restores {
		t.Fatalf("the runtime restored %d images from it; want none", got-restores)
	}
}

// TestMoveOutDropsImage: a move that fails (its image never became
// durable) keeps the sandbox's image on this node; one that succeeds
// removes it, as does the uploader for a sandbox an API process re-homed
// (its row names another node, its image durable).
func TestMoveOutDropsImage(t *testing.T) {
	b := &disk.Bucket{Root: t.TempDir()}
	e := nodetest.New(t, withImages(t, b, t.TempDir()), func(cfg *node.Config) { cfg.Store = cfg.Store.OnNode("n1") })
	ctx := context.Background()
	if err := e.Store.Nodes().Heartbeat(ctx, store.NodeInfo{Name: "n2", Addr: "127.0.0.1:1", Slots: 1, StartedAt: time.Now(), LeaseUntil: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	sb := e.Create(t, nodetest.Plan(60_000))
	pause(t, e, sb.ID)
	// No uploader yet: the image never becomes durable.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := e.Node.MoveOut(short, sb.ID, "n2"); err == nil {
		t.Fatal("a move whose image never became durable succeeded")
	}
	if _, err := os.Stat(e.Image(sb.ID)); err != nil {
		t.Fatalf("the image after a failed move: %v; want kept", err)
	}
	if row := e.Row(t, sb.ID); row.Node != "n1" {
		t.Fatalf("a failed move left the sandbox on %s; want n1", row.Node)
	}
	runUploader(t, e.Node)
	if mv, err := e.Node.MoveOut(ctx, sb.ID, "n2"); err != nil || mv.Sandbox.Node != "n2" {
		t.Fatalf("MoveOut = %+v, %v; want on n2", mv.Sandbox, err)
	}
	if _, err := os.Stat(e.Image(sb.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the image after the move: %v; want removed", err)
	}

	// Re-homed by an API process, not by this node.
	sb2 := e.Create(t, nodetest.Plan(60_000))
	pause(t, e, sb2.ID)
	waitDurable(t, e, sb2.ID, 20*time.Second)
	if err := e.Store.AdoptPaused(ctx, sb2.ID, "n1", "n2"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * node.UploadInterval)
	for {
		if _, err := os.Stat(e.Image(sb2.ID)); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the image of a sandbox re-homed to n2 still on n1 after %s", 3*node.UploadInterval)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMoveOutOfASandboxMovedMeanwhile: while a move waits for a running
// sandbox's image to be durable, an API process re-homes it (adopt, on a
// call to the draining node's sandbox) and the node it went to resumes
// it, which forgets that it was durable. The move ends, saying where it
// is, instead of holding the sandbox's lock for MoveWait — and the
// uploader, which takes that lock to drop the image, with it, so that a
// second move, waiting for its own image, ends too (the fleet bench's
// drain with --drain-calls stalled so).
func TestMoveOutOfASandboxMovedMeanwhile(t *testing.T) {
	b := &disk.Bucket{Root: t.TempDir()}
	e := nodetest.New(t, withImages(t, b, t.TempDir()), func(cfg *node.Config) { cfg.Store = cfg.Store.OnNode("n1") })
	ctx := context.Background()
	if err := e.Store.Nodes().Heartbeat(ctx, store.NodeInfo{Name: "n2", Addr: "127.0.0.1:1", Slots: 1, StartedAt: time.Now(), LeaseUntil: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	sb := e.Create(t, nodetest.Plan(60_000))
	sb2 := e.Create(t, nodetest.Plan(60_000))
	type result struct {
		mv  node.Move
		err error
	}
	moved := make(chan result, 1)
	// No uploader yet: the move pauses the sandbox and waits.
	go func() {
		mv, err := e.Node.MoveOut(ctx, sb.ID, "n2")
		moved <- result{mv, err}
	}()
	for e.Row(t, sb.ID).State != api.StatePaused {
		time.Sleep(10 * time.Millisecond)
	}
	// What an API process's adopt and n2's resume on the call write.
	if err := e.Store.AdoptPaused(ctx, sb.ID, "n1", "n2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Store.AssignSlot(ctx, sb.ID, 1, func(int) (string, string) { return "", "" }); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.MarkResumed(ctx, sb.ID, 60_000, nil); err != nil {
		t.Fatal(err)
	}
	runUploader(t, e.Node)
	// The second move waits for the uploader, which drops the first
	// sandbox's image here under its lock.
	mv2, err := e.Node.MoveOut(ctx, sb2.ID, "n2")
	if err != nil || mv2.Sandbox.Node != "n2" || !mv2.Paused {
		t.Fatalf("the second move = %+v, %v; want paused, on n2", mv2, err)
	}
	r := <-moved
	if r.err != nil || r.mv.Sandbox.Node != "n2" || r.mv.Sandbox.State != api.StateRunning {
		t.Fatalf("the move of a sandbox re-homed and resumed meanwhile = %+v, %v; want it running on n2", r.mv.Sandbox, r.err)
	}
}

// TestMoveOutStoreUnreachable: a move whose image store refuses
// connections (a closed loopback port) or stalls (takes them and never
// answers) ends with ErrUnavailable (503) saying so — as soon as the
// uploader's pass fails, or the store does not answer the move's probe —
// not after MoveWait (an hour here: the context's deadline, far below it,
// only guards the test), leaving the sandbox paused on this node; a call
// that queued on the sandbox's lock behind the move then resumes it here.
func TestMoveOutStoreUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		// endpoint is the store's address, and stop what takes it away
		// for good before the uploader stops.
		endpoint func(t *testing.T) (addr string, stop func())
	}{
		{"refuses", func(t *testing.T) (string, func()) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			return l.Addr().String(), func() {}
		}},
		{"stalls", func(t *testing.T) (string, func()) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var conns []net.Conn
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					conns = append(conns, c) // held open, never answered
				}
			}()
			return l.Addr().String(), func() {
				l.Close()
				<-done
				for _, c := range conns {
					c.Close()
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, stop := tc.endpoint(t)
			moveOutStoreUnreachable(t, addr, stop)
		})
	}
}

func moveOutStoreUnreachable(t *testing.T, endpoint string, stop func()) {
	u, _ := url.Parse("s3://bucket/lizard")
	b, err := s3.Open(u, func(k string) string {
		return map[string]string{"AWS_ENDPOINT_URL": "http://" + endpoint, "AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	e := nodetest.New(t, withImages(t, b, t.TempDir()), func(cfg *node.Config) {
		cfg.Store = cfg.Store.OnNode("n1")
		cfg.MoveWait = time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := e.Store.Nodes().Heartbeat(ctx, store.NodeInfo{Name: "n2", Addr: "127.0.0.1:1", Slots: 1, StartedAt: time.Now(), LeaseUntil: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	runUploader(t, e.Node)
	t.Cleanup(stop) // before the uploader's: its cancelled upload's cleanup fails at once
	sb := e.Create(t, nodetest.Plan(60_000))
	moved := make(chan error, 1)
	go func() {
		_, err := e.Node.MoveOut(ctx, sb.ID, "n2")
		moved <- err
	}()
	for e.Row(t, sb.ID).State != api.StatePaused {
		time.Sleep(10 * time.Millisecond)
	}
	// A call that arrives while the move holds the sandbox's lock.
	resumed := make(chan error, 1)
	go func() {
		_, err := e.Node.Resume(ctx, sb.ID, nil)
		resumed <- err
	}()
	err = <-moved
	if ctx.Err() != nil {
		t.Fatalf("the move waited for its guard's deadline: %v", err)
	}
	if k, msg := errdefs.Classify(err); !errors.Is(err, errdefs.ErrUnavailable) || k.Status != 503 || !strings.Contains(msg, "image store is unreachable") {
		t.Fatalf("MoveOut with the image store refusing connections = %v (status %d); want a 503 saying the image store is unreachable", err, k.Status)
	}
	if err := <-resumed; err != nil {
		t.Fatalf("a call queued behind the failed move: %v; want it resumed here", err)
	}
	if row := e.Row(t, sb.ID); row.Node != "n1" || row.State != api.StateRunning {
		t.Fatalf("after the failed move the sandbox is %s on %q; want running on n1", row.State, row.Node)
	}
}
