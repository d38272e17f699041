package oci

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// testRegistry is go-containerregistry's registry on loopback; requests
// to /v2/private/ need user:secret. blobGets counts layer downloads.
type testRegistry struct {
	host     string
	blobGets atomic.Int32
}

func newRegistry(t *testing.T) *testRegistry {
	r := &testRegistry{}
	h := registry.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/v2/private/") {
			if u, p, ok := req.BasicAuth(); !ok || u != "user" || p != "secret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"log in"}]}`, http.StatusUnauthorized)
				return
			}
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.blobGets.Add(1)
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// push writes img to the registry as repo:tag, with user:secret.
func (r *testRegistry) push(t *testing.T, repo string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: "user", Password: "secret"})); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

// imageOf is an image of layers made of entries, with a config.
func imageOf(t *testing.T, cfg v1.Config, ls ...[]entry) v1.Image {
	img := empty.Image
	for _, es := range ls {
		b := tarOf(t, es...)
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestPullPinsCachesAndUnpacks(t *testing.T) {
	reg := newRegistry(t)
	img := imageOf(t, v1.Config{Env: []string{"PATH=/usr/bin:/bin", "A=1"}, WorkingDir: "/srv", User: "app", Entrypoint: []string{"/bin/app"}, Cmd: []string{"--serve"}},
		[]entry{dir("etc"), file("etc/os-release", "ID=test"), file("etc/gone", "x")},
		[]entry{file("etc/.wh.gone", ""), file("srv/app.txt", "hi")})
	ref := reg.push(t, "team/app:1", img)
	cache := t.TempDir()
	p := &Puller{Dir: cache, Registries: []string{reg.host}}
	ctx := context.Background()

	pinned, digest, err := p.Resolve(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if digest != want.String() || pinned != reg.host+"/team/app@"+want.String() {
		t.Fatalf("Resolve: got %s %s, want the image's digest %s", pinned, digest, want)
	}
	for i, wantCached := range []int{0, 2} {
		target := t.TempDir()
		before := reg.blobGets.Load()
		got, err := p.Pull(ctx, pinned, nil, target, func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		if got.Cached != wantCached || got.Layers != 2 {
			t.Errorf("pull %d: %d of %d layers cached, want %d", i+1, got.Cached, got.Layers, wantCached)
		}
		// The config blob is fetched each time; layers only the first.
		if gets := reg.blobGets.Load() - before; i == 1 && gets != 1 {
			t.Errorf("pull %d: %d blob downloads, want 1 (the config; layers from the cache)", i+1, gets)
		}
		if got.Digest != digest || got.Workdir != "/srv" || got.User != "app" || strings.Join(got.Env, " ") != "PATH=/usr/bin:/bin A=1" ||
			strings.Join(got.Entrypoint, " ") != "/bin/app" || strings.Join(got.Cmd, " ") != "--serve" {
			t.Errorf("pull %d: got %+v, want the image's config", i+1, got)
		}
		if b, err := os.ReadFile(filepath.Join(target, "srv/app.txt")); err != nil || string(b) != "hi" {
			t.Errorf("srv/app.txt: got %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(target, "etc/gone")); !os.IsNotExist(err) {
			t.Errorf("etc/gone: got %v, want it whited out", err)
		}
	}
	// The tag moves: a template pinned to the old digest still pulls it.
	reg.push(t, "team/app:1", imageOf(t, v1.Config{}, []entry{file("new", "n")}))
	if _, d2, _ := p.Resolve(ctx, ref, nil); d2 == digest {
		t.Errorf("the moved tag resolved to the old digest")
	}
	target := t.TempDir()
	if _, err := p.Pull(ctx, pinned, nil, target, func(string) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "srv/app.txt")); err != nil {
		t.Errorf("the pinned pull is not the pinned image: %v", err)
	}
}

func TestPullPrivateImage(t *testing.T) {
	reg := newRegistry(t)
	ref := reg.push(t, "private/app:1", imageOf(t, v1.Config{}, []entry{file("secret.txt", "s")}))
	ctx := context.Background()
	p := &Puller{Dir: t.TempDir(), Registries: []string{reg.host}}

	_, _, err := p.Resolve(ctx, ref, nil)
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("without credentials: got %v, want a 400 saying the registry refused (401) and to give credentials", err)
	}
	_, _, err = p.Resolve(ctx, ref, &Auth{Username: "user", Password: "wrong"})
	if err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("a wrong password: got %v, want refused, the password not in the message", err)
	}
	pinned, _, err := p.Resolve(ctx, ref, &Auth{Username: "user", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	// A pull of the pinned image without credentials is refused too,
	// whatever the cache holds: the manifest comes from the registry.
	if _, err := p.Pull(ctx, pinned, &Auth{Username: "user", Password: "secret"}, t.TempDir(), func(string) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pull(ctx, pinned, nil, t.TempDir(), func(string) {}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("a pull of the cached private image without credentials: got %v, want refused", err)
	}

	// The server's docker config.json.
	conf := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(conf, []byte(`{"auths":{"`+reg.host+`":{"auth":"dXNlcjpzZWNyZXQ="}}}`), 0o600)
	p.ConfigFile = conf
	if _, _, err := p.Resolve(ctx, ref, nil); err != nil {
		t.Fatalf("with the config file's credentials: %v", err)
	}
}

func TestPullPicksLinuxAmd64FromAnIndex(t *testing.T) {
	reg := newRegistry(t)
	amd, _ := random.Image(64, 1)
	arm, _ := random.Image(64, 1)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	ref, _ := name.ParseReference(reg.host + "/multi:latest")
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	_, digest, err := (&Puller{Dir: t.TempDir(), Registries: []string{reg.host}}).Resolve(context.Background(), ref.String(), nil)
	want, _ := amd.Digest()
	if err != nil || digest != want.String() {
		t.Fatalf("got %s, %v; want the linux/amd64 image %s", digest, err, want)
	}

	armOnly := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	ref2, _ := name.ParseReference(reg.host + "/armonly:latest")
	remote.WriteIndex(ref2, armOnly)
	if _, _, err := (&Puller{Dir: t.TempDir(), Registries: []string{reg.host}}).Resolve(context.Background(), ref2.String(), nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("an arm64-only image: got %v, want a 400", err)
	}
}

func TestPullRefusesTooManyLayers(t *testing.T) {
	reg := newRegistry(t)
	var ls [][]entry
	for i := range 5 {
		ls = append(ls, []entry{file("f"+string(rune('a'+i)), "x")})
	}
	ref := reg.push(t, "deep:1", imageOf(t, v1.Config{}, ls...))
	p := &Puller{Dir: t.TempDir(), Limits: Limits{Layers: 4}, Registries: []string{reg.host}}
	pinned, _, err := p.Resolve(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := reg.blobGets.Load()
	if _, err := p.Pull(context.Background(), pinned, nil, t.TempDir(), func(string) {}); err == nil || !strings.Contains(err.Error(), "5 layers; at most 4") {
		t.Fatalf("got %v, want refused for its layer count", err)
	}
	if reg.blobGets.Load() != before {
		t.Errorf("layers were downloaded before the image was refused")
	}
}

func TestRegistryAllowList(t *testing.T) {
	reg := newRegistry(t)
	ref := reg.push(t, "team/app:1", imageOf(t, v1.Config{}, []entry{file("a", "a")}))
	p := &Puller{Dir: t.TempDir(), Registries: []string{"registry.example.com"}}
	before := reg.blobGets.Load()
	if _, _, err := p.Resolve(context.Background(), ref, nil); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "--registry-allow registry.example.com") {
		t.Fatalf("an image of a registry not allowed: got %v, want a 400 naming the flag", err)
	}
	if _, _, err := p.Resolve(context.Background(), "python:3.12", nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("Docker Hub, not allowed: got %v, want a 400 before any request", err)
	}
	if reg.blobGets.Load() != before {
		t.Errorf("the registry was asked")
	}
	p.Registries = append(p.Registries, reg.host)
	if _, _, err := p.Resolve(context.Background(), ref, nil); err != nil {
		t.Fatalf("an allowed registry: %v", err)
	}
}

// TestPrivateAddresses: a server that names no registries pulls from any
// registry but at a public address, so an API key cannot aim it at the
// services beside it (the registry here is on loopback, as a metadata
// service or an admin port would be).
func TestPrivateAddresses(t *testing.T) {
	reg := newRegistry(t)
	ref := reg.push(t, "team/app:1", imageOf(t, v1.Config{}, []entry{file("a", "a")}))
	before := reg.blobGets.Load()
	_, _, err := (&Puller{Dir: t.TempDir()}).Resolve(context.Background(), ref, nil)
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "--registry-allow") {
		t.Fatalf("a registry on loopback, none named: got %v, want a 400 naming --registry-allow", err)
	}
	if reg.blobGets.Load() != before {
		t.Errorf("the registry was asked")
	}
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.1.1", "100.64.0.1", "0.0.0.0", "::1", "203.0.113.5"} {
		_, _, err := (&Puller{Dir: t.TempDir()}).Resolve(context.Background(), net.JoinHostPort(a, "5000")+"/x:1", nil)
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("a registry at %s: got %v, want refused before connecting", a, err)
		}
	}
}
