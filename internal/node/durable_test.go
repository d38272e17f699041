package node_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
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

// withImages gives a node the image store over b and a cache of its own
// in cache.
func withImages(t *testing.T, b imagestore.Bucket, cache string) func(*node.Config) {
	return func(cfg *node.Config) {
		cfg.Images = imagestore.New(b)
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

// A corrupt image in the store is caught by its checksum: fetched again,
// then reported lost, the resume failing with a typed error.
func TestCorruptImageReportedLost(t *testing.T) {
	for _, be := range imageBackends {
		t.Run(be.name, func(t *testing.T) {
			b, _, _ := be.open(t)
			e := nodetest.New(t, withImages(t, b, t.TempDir()))
			ctx := context.Background()
			sb := e.Create(t, nodetest.Plan(60_000))
			pause(t, e, sb.ID)
			runUploader(t, e.Node)
			waitDurable(t, e, sb.ID, 20*time.Second)
			m, err := e.Config.Images.Stat(ctx, "paused/"+sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := b.Get(ctx, m.Object)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(rc)
			rc.Close()
			data[len(data)/3] ^= 0x55
			if err := b.Put(ctx, m.Object, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			other := otherNode(t, e, b)
			_, err = other.node.Resume(ctx, sb.ID, nil)
			if !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "lost from the image store") {
				t.Fatalf("Resume from a corrupt image: %v; want ErrGone saying the image was lost", err)
			}
			if row := e.Row(t, sb.ID); row.Live() || row.State != api.StateFailed {
				t.Fatalf("after a lost image the sandbox is %s (live %v); want failed", row.State, row.Live())
			}
		})
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
	if err := e.Store.Heartbeat(ctx, store.NodeInfo{Name: "n2", Addr: "127.0.0.1:1", Slots: 1, StartedAt: time.Now(), LeaseUntil: time.Now().Add(time.Hour)}); err != nil {
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
