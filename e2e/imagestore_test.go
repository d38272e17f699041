package e2e

// The image store (docs/storage.md) against a real S3 server (versitygw,
// testenv.S3Server): `lizard serve` refusing a store it cannot use, pauses
// and snapshots made durable, the store down and back; and a cluster whose
// paused sandbox and snapshot outlive the node that made them.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/testenv"
)

// startServerEnv is startServer with env added to the server's
// environment.
func startServerEnv(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	testenv.RequiresRoot(t)
	s := &server{t: t, bin: testenv.Binary(t, "lizard"), dataDir: t.TempDir(), pool: takePool(t), args: args, env: env}
	testenv.Binary(t, "lizard-agent")
	testenv.Binary(t, "lizard-client")
	s.runsc = testenv.Binary(t, "runsc")
	s.listen = freeAddr(t)
	s.url = "http://" + s.listen
	s.start()
	t.Cleanup(s.shutdown)
	return s
}

// sealedStoreEnv is the environment of a cluster's processes on image
// store s: its credentials, and the secrets key every node derives the
// image key from (docs/storage.md#sealing).
func sealedStoreEnv(s *testenv.S3) []string {
	key := make([]byte, 32)
	rand.Read(key)
	return append(s.Env(), "LIZARD_SECRETS_KEY="+base64.StdEncoding.EncodeToString(key))
}

// waitSnapshotDurable polls snapshot id until it is durable.
func waitSnapshotDurable(t *testing.T, c *client.Client, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		sn, err := c.Snapshots().Get(context.Background(), id)
		if err == nil && sn.Durable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot %s not durable after %s: %+v, %v", id, within, sn, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitSandboxDurable(t *testing.T, c *client.Client, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		sb, err := c.GetSandbox(context.Background(), id)
		if err == nil && sb.Durable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s not durable after %s: %+v, %v", id, within, sb, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestImageStoreServe(t *testing.T) {
	testenv.RequiresRoot(t)
	s3 := testenv.S3Server(t)
	storeURL := "s3://" + s3.Bucket + "/lizard"

	// A store the server cannot use: it refuses to start, naming the
	// setting.
	t.Run("RefusesBadStore", func(t *testing.T) {
		for _, tc := range []struct {
			name, url string
			env       []string
			want      string
		}{
			{"wrong secret", storeURL, []string{"AWS_SECRET_ACCESS_KEY=wrong"}, "AWS_SECRET_ACCESS_KEY"},
			{"missing bucket", "s3://nosuchbucket/x", nil, `bucket "nosuchbucket" does not exist`},
			{"no credentials", storeURL, []string{"AWS_ACCESS_KEY_ID="}, "AWS_ACCESS_KEY_ID"},
			{"bad scheme", "ftp://x/y", nil, "--image-store"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, testenv.Binary(t, "lizard"), "serve", "--listen", freeAddr(t), "--data-dir", t.TempDir(),
					"--cache-dir", cacheDir(), "--egress=none", "--metrics-listen=", "--image-store", tc.url)
				cmd.Env = append(append(os.Environ(), s3.Env()...), tc.env...)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				if err == nil || ctx.Err() != nil || !strings.Contains(out.String(), tc.want) {
					t.Fatalf("lizard serve with %s: %v; want it to exit naming %s:\n%s", tc.name, err, tc.want, out.String())
				}
			})
		}
	})

	s := startServerEnv(t, s3.Env(), "--image-store", storeURL)
	c := s.createProject("proj_store")
	ctx := context.Background()
	sb := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	id := sb.SandboxID
	if sb.Durable {
		t.Fatal("a running sandbox reports durable")
	}
	py(t, c, id, "x = 41")

	t.Run("SnapshotDurable", func(t *testing.T) {
		sn, err := c.Snapshot(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		waitSnapshotDurable(t, c, sn.SnapshotID, time.Minute)
		if err := c.Snapshots().Delete(ctx, sn.SnapshotID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PauseWaitDurable", func(t *testing.T) {
		p, err := c.PauseSandboxWith(ctx, id, api.PauseRequest{WaitDurable: true})
		if err != nil || p.State != api.StatePaused || !p.Durable {
			t.Fatalf("pause waitDurable = %+v, %v; want paused and durable", p, err)
		}
		if got := py(t, c, id, "print(x + 1)"); got != "42" {
			t.Fatalf("after a durable pause x + 1 = %q, want 42", got)
		}
		if got, _ := c.GetSandbox(ctx, id); got.Durable {
			t.Fatal("a resumed sandbox reports durable")
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/sandboxes/"+id+"/pause", strings.NewReader(`{"waitDurable": "yes"}`))
		req.Header.Set("Authorization", "Bearer "+s.keys[c])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body.String(), "waitDurable") {
			t.Fatalf("pause with waitDurable a string: %d %s; want 400 naming waitDurable", resp.StatusCode, body.String())
		}
		other := s.createProject("proj_store_other")
		var ce *client.Error
		if _, err := other.PauseSandboxWith(ctx, id, api.PauseRequest{WaitDurable: true}); !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
			t.Fatalf("pause of another project's sandbox: %v; want 404", err)
		}
	})

	// The store down: a pause still answers, not durable; back: durable.
	t.Run("StoreDownThenUp", func(t *testing.T) {
		s3.Stop()
		p, err := c.PauseSandbox(ctx, id)
		if err != nil || p.State != api.StatePaused || p.Durable {
			s3.Start()
			t.Fatalf("pause with the store down = %+v, %v; want paused, not durable", p, err)
		}
		time.Sleep(3 * time.Second)
		if got, _ := c.GetSandbox(ctx, id); got.Durable {
			s3.Start()
			t.Fatal("durable while the store is down")
		}
		s3.Start()
		waitSandboxDurable(t, c, id, time.Minute)
		if got := py(t, c, id, "print(x)"); got != "41" {
			t.Fatalf("x = %q after the store came back, want 41", got)
		}
	})
	if err := c.KillSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// killProcsOf kills -9, by pid, every process whose command line names
// dir: a node's runsc and sandbox processes, as the loss of its machine
// would.
func killProcsOf(t *testing.T, dir string) {
	t.Helper()
	for _, p := range hostProcs(dir) {
		if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("killing %s: %v", p, err)
		}
	}
}

// TestClusterImageStore: a paused sandbox and a snapshot outlive the node
// that made them, which is killed with its sandboxes' processes; with the
// store down pauses still answer and become durable once it is back.
func TestClusterImageStore(t *testing.T) {
	testenv.RequiresRoot(t)
	s3 := testenv.S3Server(t)
	c, cl := startClusterWith(t, 3, 2, sealedStoreEnv(s3), []string{"--image-store", "s3://" + s3.Bucket + "/cluster", "--template-snapshot=true"}, nil)
	ctx := context.Background()
	// Creates restore each node's template snapshot, as in production:
	// the images moved are of restored sandboxes.
	for _, n := range c.nodes {
		deadline := time.Now().Add(5 * time.Minute)
		for l := n.logs(); !strings.Contains(l, `msg="template snapshot made"`) && !strings.Contains(l, `msg="template snapshot found"`); l = n.logs() {
			if time.Now().After(deadline) {
				t.Fatalf("node %s made no template snapshot", n.name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	sb := newSandbox(t, cl[0], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	a := c.nodeOf(sb.SandboxID)
	run(t, cl[0], sb.SandboxID, "python", "x = 41")
	sn, err := cl[0].Snapshot(ctx, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl[1].PauseSandboxWith(ctx, sb.SandboxID, api.PauseRequest{WaitDurable: true})
	if err != nil || !p.Durable {
		t.Fatalf("pause waitDurable = %+v, %v; want durable", p, err)
	}
	waitSnapshotDurable(t, cl[0], sn.SnapshotID, time.Minute)

	// Node A and everything it ran die; its lease runs out.
	killedAt := time.Now()
	c.lose(t, a)
	if got, err := cl[0].GetSandbox(ctx, sb.SandboxID); err != nil || got.State != api.StatePaused || !got.Durable {
		t.Fatalf("durable paused sandbox of a lost node = %+v, %v; want still paused and durable", got, err)
	}

	t.Run("ResumeElsewhere", func(t *testing.T) {
		ex := run(t, cl[1], sb.SandboxID, "python", "x + 1")
		if len(ex.Results) == 0 || ex.Results[0].Data != "42" {
			t.Fatalf("x + 1 after resuming on another node = %+v; want 42", ex.Results)
		}
		if n := c.nodeOf(sb.SandboxID); n == a {
			t.Fatalf("sandbox still on lost node %s", a)
		}
		t.Logf("resumed on %s, %s after node %s was killed", c.nodeOf(sb.SandboxID), time.Since(killedAt).Round(time.Millisecond), a)
	})

	t.Run("SnapshotRestoresElsewhere", func(t *testing.T) {
		cp := newSandbox(t, cl[0], api.CreateSandboxRequest{SnapshotID: sn.SnapshotID, TimeoutMs: ms(600_000)})
		if n := c.nodeOf(cp.SandboxID); n == a {
			t.Fatalf("create from a snapshot placed on lost node %s", a)
		}
		if ex := run(t, cl[0], cp.SandboxID, "python", "x"); len(ex.Results) == 0 || ex.Results[0].Data != "41" {
			t.Fatalf("x in a copy of the snapshot on another node = %+v; want 41", ex.Results)
		}
		if err := cl[0].KillSandbox(ctx, cp.SandboxID); err != nil {
			t.Fatal(err)
		}
	})

	// Paused again on its new node, resumed there, paused again: that
	// node is lost in turn, and the third resumes it.
	t.Run("RepausedThenLostAgain", func(t *testing.T) {
		b := c.nodeOf(sb.SandboxID)
		if _, err := cl[0].PauseSandboxWith(ctx, sb.SandboxID, api.PauseRequest{WaitDurable: true}); err != nil {
			t.Fatal(err)
		}
		run(t, cl[0], sb.SandboxID, "python", "x = 43")
		if p, err := cl[1].PauseSandboxWith(ctx, sb.SandboxID, api.PauseRequest{WaitDurable: true}); err != nil || !p.Durable {
			t.Fatalf("pause waitDurable = %+v, %v", p, err)
		}
		c.lose(t, b)
		if ex := run(t, cl[1], sb.SandboxID, "python", "x"); len(ex.Results) == 0 || ex.Results[0].Data != "43" {
			t.Fatalf("x after a second move = %+v; want 43", ex.Results)
		}
		if n := c.nodeOf(sb.SandboxID); n == a || n == b {
			t.Fatalf("sandbox on lost node %s", n)
		}
	})

	t.Run("StoreDownThenUp", func(t *testing.T) {
		s3.Stop()
		p, err := cl[0].PauseSandbox(ctx, sb.SandboxID)
		if err != nil || p.State != api.StatePaused || p.Durable {
			s3.Start()
			t.Fatalf("pause with the store down = %+v, %v; want paused, not durable", p, err)
		}
		s3.Start()
		waitSandboxDurable(t, cl[1], sb.SandboxID, time.Minute)
	})

	for _, id := range []string{sb.SandboxID} {
		if err := cl[0].KillSandbox(ctx, id); err != nil {
			t.Errorf("KillSandbox(%s): %v", id, err)
		}
	}
	// Its node is lost: the snapshot goes all the same.
	if err := cl[0].Snapshots().Delete(ctx, sn.SnapshotID); err != nil {
		t.Errorf("Snapshots().Delete of a lost node's snapshot: %v", err)
	}
}

// TestClusterTamperedImage: the red-team's attack on the image store. A
// sandbox holds a marker in its memory and in a file; paused durable, its
// image in the bucket must hold neither in clear. Then, as someone who can
// write the bucket, its object is replaced with a tar of the image and its
// manifest recomputed to match (SHA-256, as Lizard wrote before sealing),
// and a second sandbox's object has a byte flipped. Its node is drained,
// which moves both to the other node; there each resume ends the sandbox
// failed with a 410 naming the image and why, a sandbox.failed event and
// a count in lizard_images_rejected_total, and nothing is restored.
func TestClusterTamperedImage(t *testing.T) {
	testenv.RequiresRoot(t)
	s3 := testenv.S3Server(t)
	const prefix = "tamper"
	c, cl := startClusterWith(t, 2, 1, sealedStoreEnv(s3), []string{"--image-store", "s3://" + s3.Bucket + "/" + prefix, "--metrics-listen=127.0.0.1:0"}, nil)
	ctx := context.Background()
	bucket := openBucket(t, s3, prefix)
	marker := fmt.Sprintf("lizard-marker-%d-%x", time.Now().UnixNano(), time.Now().UnixNano()*7919)

	adm, err := client.New(client.Config{BaseURL: c.apis[0].url, APIKey: c.secret})
	if err != nil {
		t.Fatal(err)
	}
	// Both on n1: n2 takes nothing until they are paused.
	if _, err := adm.DrainNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		sb := newSandbox(t, cl[0], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
		ids = append(ids, sb.SandboxID)
		py(t, cl[0], sb.SandboxID, fmt.Sprintf("m = %q * 4096\nopen('/home/user/secret.txt', 'w').write(%q * 64)", marker, marker))
		if p, err := cl[0].PauseSandboxWith(ctx, sb.SandboxID, api.PauseRequest{WaitDurable: true}); err != nil || !p.Durable {
			t.Fatalf("pause waitDurable = %+v, %v; want durable", p, err)
		}
	}
	const from = "n1"
	if _, err := adm.UndrainNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	var imageDir string
	if err := c.db.QueryRow(`SELECT image_dir FROM sandbox_pause WHERE sandbox_id = $1`, ids[0]).Scan(&imageDir); err != nil {
		t.Fatal(err)
	}

	t.Run("EncryptedAtRest", func(t *testing.T) {
		// The image on the node's disk holds the marker (else this
		// proves nothing); the bucket's bytes do not.
		local := false
		filepath.WalkDir(imageDir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(marker)) {
					local = true
				}
			}
			return nil
		})
		if !local {
			t.Fatalf("the marker is not in the image on the node's disk %s: the check below would prove nothing", imageDir)
		}
		for _, id := range ids {
			keys, err := bucket.List(ctx, "paused/"+id+"/")
			if err != nil || len(keys) != 2 {
				t.Fatalf("objects of paused/%s = %v, %v; want a manifest and an object", id, keys, err)
			}
			for _, k := range keys {
				if data := getObject(t, bucket, k); bytes.Contains(data, []byte(marker)) || bytes.Contains(data, []byte("lizard-agent")) {
					t.Fatalf("object %s (%d bytes) holds the sandbox's bytes in clear", k, len(data))
				}
			}
		}
	})

	// As the red-team: a tar of the image, a manifest of its SHA-256.
	image0 := "paused/" + ids[0]
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	if err := tw.AddFS(os.DirFS(imageDir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	obj := image0 + "/data-attacker.tar"
	if err := bucket.Put(ctx, obj, bytes.NewReader(tarBuf.Bytes())); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(tarBuf.Bytes())
	manifest, _ := json.Marshal(map[string]any{"object": obj, "sha256": hex.EncodeToString(sum[:]), "size": tarBuf.Len(), "created": time.Now().UTC()})
	if err := bucket.Put(ctx, image0+"/manifest.json", bytes.NewReader(manifest)); err != nil {
		t.Fatal(err)
	}
	// A byte flipped in the second's object.
	image1 := "paused/" + ids[1]
	keys, _ := bucket.List(ctx, image1+"/data-")
	if len(keys) != 1 {
		t.Fatalf("objects of %s: %v; want one", image1, keys)
	}
	data := getObject(t, bucket, keys[0])
	data[len(data)/2] ^= 0x40
	if err := bucket.Put(ctx, keys[0], bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}

	if d, err := adm.DrainNode(ctx, from); err != nil || !d.Draining {
		t.Fatalf("drain of %s = %+v, %v", from, d, err)
	}
	for i, tc := range []struct{ image, says, reason string }{
		{image0, "stored unsealed", "unsealed"},
		{image1, "failed its authentication", "tampered"},
	} {
		id := ids[i]
		_, err := cl[0].ResumeSandbox(ctx, id, api.ResumeRequest{})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusGone || !strings.Contains(ce.Message, tc.image) || !strings.Contains(ce.Message, tc.says) {
			t.Fatalf("resume of %s after its image was altered: %v; want 410 naming %s, saying %q", id, err, tc.image, tc.says)
		}
		to := c.nodeOf(id)
		if to == from {
			t.Fatalf("sandbox %s still on drained node %s", id, from)
		}
		if sb, err := cl[0].GetSandbox(ctx, id); err != nil || sb.State != api.StateFailed {
			t.Fatalf("sandbox after a refused image = %+v, %v; want failed", sb, err)
		}
		evs, err := cl[0].Events().List(ctx, client.EventOptions{SandboxID: id, Types: []string{api.LifecycleFailed}, FromStart: true})
		if err != nil || len(evs.Events) != 1 || !strings.Contains(evs.Events[0].Data.Reason, tc.says) {
			t.Fatalf("sandbox.failed events of %s = %+v, %v; want one saying %q", id, evs, err, tc.says)
		}
		n := c.node(to)
		murl := regexp.MustCompile(`msg="serving metrics".* url=(\S+)`).FindStringSubmatch(n.logs())
		if murl == nil {
			t.Fatalf("node %s logged no metrics URL", to)
		}
		if got := scrape(t, murl[1])[fmt.Sprintf(`lizard_images_rejected_total{reason=%q}`, tc.reason)]; got != 1 {
			t.Fatalf("lizard_images_rejected_total{reason=%q} on %s = %v, want 1", tc.reason, to, got)
		}
		// Nothing restored: the image cache holds nothing of it, and
		// no runsc of the sandbox ran there.
		if ents, _ := os.ReadDir(filepath.Join(n.dataDir, "image-cache")); len(ents) != 0 {
			t.Fatalf("node %s's image cache holds %v after a refused image", to, ents)
		}
		if procs := hostProcs(id); len(procs) != 0 {
			t.Fatalf("processes of refused sandbox %s: %v", id, procs)
		}
	}
}
