package e2e

// Custom templates in a cluster (docs/cluster.md): built through the API
// by one node, published to the image store (versitygw) and fetched from
// it by another; placement prefers the node holding the build.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/imagestore/s3"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestClusterTemplates: a bad recipe is refused naming its field; a
// template built through `lizard api` runs on the node that built it,
// where creates go while it has room, and on the other node, which
// fetches it from the image store — after refusing it with a typed error
// while the object there is corrupt (fetched twice); another project's
// key can neither use nor delete it; its deletion removes it from the
// store and both nodes; and a cluster with a node that keeps images on
// its own disk refuses builds naming --image-store.
func TestClusterTemplates(t *testing.T) {
	testenv.RequiresRoot(t)
	srv := testenv.S3Server(t)
	const prefix = "ctemplates"
	c, cl := startClusterWith(t, 2, 1, sealedStoreEnv(srv), []string{"--image-store", "s3://" + srv.Bucket + "/" + prefix, "--registry-allow", "127.0.0.1"}, []string{"--registry-allow", "127.0.0.1"})
	api0 := cl[0]
	ctx := context.Background()

	if _, _, _, err := buildTemplate(t, api0, api.BuildTemplateRequest{Name: "bad", Recipe: api.TemplateRecipe{
		Files: []api.TemplateFile{{Path: "relative/x", Content: ""}}}}); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "recipe.files[0].path") {
		t.Fatalf("a build with a relative file path = %v; want invalid argument naming recipe.files[0].path", err)
	}

	nonce := make([]byte, 6)
	rand.Read(nonce)
	want := hex.EncodeToString(nonce)
	tpl, _, events, err := buildTemplate(t, api0, api.BuildTemplateRequest{Name: "ct", Recipe: api.TemplateRecipe{
		Files: []api.TemplateFile{{Path: "/home/user/ct.txt", Content: base64.StdEncoding.EncodeToString([]byte(want))}},
		Env:   map[string]string{"CT_NONCE": want}}})
	if err != nil {
		t.Fatalf("building a template through the api: %v; events:\n%+v", err, events)
	}
	builder := ""
	for _, ev := range events {
		if n, ok := strings.CutPrefix(ev.Text, "building on node "); ok {
			builder = n
		}
	}
	other := "n1"
	if builder == "n1" {
		other = "n2"
	}
	if builder == "" {
		t.Fatalf("the build's events name no node: %+v", events)
	}
	image := "templates/" + tpl.Key
	// The builder's heartbeat reports the build: placement reads it.
	deadline := time.Now().Add(3 * clusterLease)
	for !strings.Contains(nodeImages(t, c, builder), image) {
		if time.Now().After(deadline) {
			t.Fatalf("node %s never reported holding %s: %q", builder, image, nodeImages(t, c, builder))
		}
		time.Sleep(200 * time.Millisecond)
	}

	check := func(id string) {
		t.Helper()
		if got := py(t, api0, id, `import os; print(open("/home/user/ct.txt").read(), os.environ["CT_NONCE"])`); got != want+" "+want {
			t.Errorf("sandbox %s on %s printed %q; want the template's file and env, %q twice", id, c.nodeOf(id), got, want)
		}
	}
	create := func() (*api.Sandbox, error) {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		return api0.CreateSandbox(cctx, api.CreateSandboxRequest{Template: "ct", TimeoutMs: ms(300_000)})
	}
	// Two creates in a row: without the preference the second would go
	// to the emptier node.
	var held []string
	for range 2 {
		sb := newSandbox(t, api0, api.CreateSandboxRequest{Template: "ct", TimeoutMs: ms(300_000)})
		if n := c.nodeOf(sb.SandboxID); n != builder {
			t.Errorf("sandbox of the template placed on %s; want %s, which holds its build", n, builder)
		}
		held = append(held, sb.SandboxID)
	}
	check(held[0])

	t.Run("OtherProject", func(t *testing.T) {
		p2 := otherProject(t, c, "p2")
		if _, err := p2.Templates().Get(ctx, "ct"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another project's Templates().Get = %v; want not found", err)
		}
		if err := p2.Templates().Delete(ctx, "ct"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another project's Templates().Delete = %v; want not found", err)
		}
		if sb, err := p2.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "ct"}); !errors.Is(err, client.ErrNotFound) {
			if sb != nil {
				p2.KillSandbox(ctx, sb.SandboxID)
			}
			t.Errorf("another project's create from the template = %v; want not found", err)
		}
	})

	// The builder stops: creates go to the other node, which fetches the
	// build from the store — refused while the object is corrupt.
	c.node(builder).stop()
	bucket := openBucket(t, srv, prefix)
	objs, err := bucket.List(ctx, image+"/data-")
	if err != nil || len(objs) != 1 {
		t.Fatalf("objects of %s in the store = %v, %v; want one", image, objs, err)
	}
	original := getObject(t, bucket, objs[0])
	bad := bytes.Clone(original)
	bad[len(bad)/2] ^= 0xff
	if err := bucket.Put(ctx, objs[0], bytes.NewReader(bad)); err != nil {
		t.Fatal(err)
	}
	if sb, err := create(); !isUnavailable(err) || !strings.Contains(err.Error(), "lost from the image store") {
		if sb != nil {
			api0.KillSandbox(ctx, sb.SandboxID)
		}
		t.Errorf("create from a template whose object is corrupt = %v; want unavailable, lost from the image store", err)
	}
	if !c.node(other).logged("failed its check; fetching it again") {
		t.Errorf("node %s did not fetch the corrupt build again:\n%s", other, c.node(other).logs())
	}
	if err := bucket.Put(ctx, objs[0], bytes.NewReader(original)); err != nil {
		t.Fatal(err)
	}
	fetched := newSandbox(t, api0, api.CreateSandboxRequest{Template: "ct", TimeoutMs: ms(300_000)})
	if n := c.nodeOf(fetched.SandboxID); n != other {
		t.Errorf("create with %s stopped placed on %s; want %s", builder, n, other)
	}
	check(fetched.SandboxID)
	if !c.node(other).logged("template build fetched from the image store") {
		t.Errorf("node %s logged no fetch of the build", other)
	}

	// Deleted: from the store and from both nodes' disks.
	c.node(builder).start()
	for _, id := range append(held, fetched.SandboxID) {
		if err := api0.KillSandbox(ctx, id); err != nil {
			t.Fatalf("KillSandbox(%s): %v", id, err)
		}
	}
	if err := api0.Templates().Delete(ctx, "ct"); err != nil {
		t.Fatalf("Templates().Delete: %v", err)
	}
	if left, err := bucket.List(ctx, image+"/"); err != nil || len(left) != 0 {
		t.Errorf("the store after the template's deletion holds %v, %v; want nothing of it", left, err)
	}
	for _, n := range c.nodes {
		if _, err := os.Stat(filepath.Join(n.dataDir, "template-cache", "templates", "custom-"+tpl.Key)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("node %s keeps the deleted template's build: %v", n.name, err)
		}
	}

	// A template on an image (from): resolved by the api process, pulled
	// by the node placement picks, published whole to the image store and
	// fetched from it by the other node.
	t.Run("FromImage", func(t *testing.T) {
		password := "pw-" + want
		reg := imageRegistry(t, password)
		pushImage(t, reg+"/private/ct:1", password, noPythonImage(t, want))
		itpl, _, events, err := buildTemplate(t, api0, api.BuildTemplateRequest{Name: "cimg", Recipe: api.TemplateRecipe{From: reg + "/private/ct:1"},
			Registry: &api.RegistryAuth{Username: "user", Password: password}})
		if err != nil {
			t.Fatalf("building a template on an image through the api: %v; events:\n%+v", err, events)
		}
		ibuilder := ""
		for _, ev := range events {
			if n, ok := strings.CutPrefix(ev.Text, "building on node "); ok {
				ibuilder = n
			}
		}
		iother := "n1"
		if ibuilder == "n1" {
			iother = "n2"
		}
		deadline := time.Now().Add(3 * clusterLease)
		for !strings.Contains(nodeImages(t, c, ibuilder), "templates/"+itpl.Key) {
			if time.Now().After(deadline) {
				t.Fatalf("node %s never reported holding the image template's build", ibuilder)
			}
			time.Sleep(200 * time.Millisecond)
		}
		c.node(ibuilder).stop()
		sb := newSandbox(t, api0, api.CreateSandboxRequest{Template: "cimg", TimeoutMs: ms(300_000)})
		if n := c.nodeOf(sb.SandboxID); n != iother {
			t.Errorf("a sandbox of the image template with %s stopped placed on %s; want %s", ibuilder, n, iother)
		}
		res, err := api0.Exec(ctx, sb.SandboxID, api.ProcessRequest{Cmd: "cat /etc/nonce; echo; id -un; echo $IMAGE_VAR"}, nil)
		if err != nil || res.Stdout != want+"\nuser\nfrom-the-image\n" {
			t.Errorf("the image template's sandbox on %s = %+v, %v; want the image's file, USER and ENV", iother, res, err)
		}
		for _, n := range c.nodes {
			if strings.Contains(n.logs(), password) {
				t.Errorf("node %s logged the registry password", n.name)
			}
		}
		c.node(ibuilder).start()
		api0.KillSandbox(ctx, sb.SandboxID)
		if err := api0.Templates().Delete(ctx, "cimg"); err != nil {
			t.Errorf("deleting the image template: %v", err)
		}
	})

	t.Run("DiskStoreRefused", func(t *testing.T) {
		n3 := &server{t: t, bin: c.nodes[0].bin, dataDir: t.TempDir(), pool: takePool(t), runsc: c.nodes[0].runsc, role: "node",
			env: c.nodes[0].env, dbURL: c.dbURL, name: "n3", listen: freeAddr(t)}
		n3.url = "http://" + n3.listen
		n3.args = []string{"--name", "n3", "--lease", clusterLease.String(), "--template-snapshot=false"}
		n3.start()
		t.Cleanup(n3.shutdown)
		deadline := time.Now().Add(3 * clusterLease)
		for {
			var live bool
			if err := c.db.QueryRow(`SELECT lease_until > $1 FROM nodes WHERE name = 'n3'`, time.Now().UnixMilli()).Scan(&live); err == nil && live {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("node n3 never registered")
			}
			time.Sleep(200 * time.Millisecond)
		}
		_, _, _, err := buildTemplate(t, api0, api.BuildTemplateRequest{Name: "ct2", Recipe: api.TemplateRecipe{Env: map[string]string{"A": "b"}}})
		if !isUnavailable(err) || !strings.Contains(err.Error(), "--image-store") || !strings.Contains(err.Error(), "n3") {
			t.Errorf("a build with node n3 on its own disk = %v; want unavailable naming n3 and --image-store", err)
		}
	})
}

// isUnavailable reports whether err is a 503 (the API's answer, or a
// build stream's error event, which carries the code).
func isUnavailable(err error) bool {
	var ae *client.Error
	return errors.As(err, &ae) && (ae.Status == http.StatusServiceUnavailable || ae.Code == api.CodeUnavailable)
}

// nodeImages is the images column of node name's row.
func nodeImages(t *testing.T, c *cluster, name string) string {
	t.Helper()
	var images string
	if err := c.db.QueryRow(`SELECT images FROM nodes WHERE name = $1`, name).Scan(&images); err != nil {
		t.Fatal(err)
	}
	return images
}

// otherProject makes project id in the cluster and returns a client of
// the first api process with its key.
func otherProject(t *testing.T, c *cluster, id string) *client.Client {
	t.Helper()
	cmd := exec.Command(c.nodes[0].bin, "admin", "create-project", "--id", id, "--json")
	cmd.Env = append(os.Environ(), c.nodes[0].env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("admin create-project: %v", err)
	}
	var p struct{ APIKey string }
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Config{BaseURL: c.apis[0].url, APIKey: p.APIKey})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func openBucket(t *testing.T, srv *testenv.S3, prefix string) *s3.Bucket {
	t.Helper()
	u, _ := url.Parse(fmt.Sprintf("s3://%s/%s", srv.Bucket, prefix))
	b, err := s3.Open(u, srv.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func getObject(t *testing.T, b *s3.Bucket, key string) []byte {
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
