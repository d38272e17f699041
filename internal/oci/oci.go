// Package oci pulls OCI and Docker images from registries and unpacks
// them into root filesystems, for templates built from an image
// (docs/templates.md: `from:`).
//
// A pull names its image by tag or digest; Resolve pins it to the digest
// of its linux/amd64 image (chosen from an index), which a template
// records, so that its rebuild pulls the same bytes. Layers are cached
// by digest in the template cache (<cache>/oci/blobs), shared by every
// template pulled from the same repository, and unpacked by Flatten,
// which treats each layer as hostile input.
//
// A layer cached for one repository is never served for another: a
// manifest lists layer digests, and anyone can write a manifest that
// lists another's private layer. Every pull fetches its manifest from
// the registry with the caller's own credentials first, and the cache is
// scoped by registry and repository, whose access that fetch proved.
//
// Credentials are the caller's (a username and password given with the
// build) or the server's docker config.json; they go to the registry
// and nowhere else: never into a template's record, nor a log line.
package oci

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netns"
)

// MaxCacheBytes bounds the layer cache (compressed layers) on a node:
// past it, the layers used longest ago are removed after a pull.
const MaxCacheBytes int64 = 20 << 30

// Auth is a registry username and password (or token).
type Auth struct {
	Username string
	Password string
}

// Puller pulls images. Dir is required.
type Puller struct {
	// Dir is the layer cache (<template cache>/oci).
	Dir string
	// ConfigFile is a docker config.json whose "auths" are used for
	// pulls that bring no credentials of their own.
	ConfigFile string
	Limits     Limits
	// Registries are the registry hosts (host:port, or a host for any of
	// its ports; docker.io for Docker Hub) images may come from;
	// empty: any registry at a public address. A pull is a request from
	// the server's host to where a user says: unless the operator names
	// the registries it trusts, a pull never connects to loopback, a
	// private range, link-local (cloud metadata) or another
	// special-purpose address, whatever the name resolves to at the
	// moment of the connection, so a key cannot aim the server at the
	// services beside it.
	Registries []string
	// CacheBytes bounds Dir's layers (default MaxCacheBytes).
	CacheBytes int64
	// Transport is for tests; nil is http.DefaultTransport.
	Transport http.RoundTripper
}

// Image is a pulled image: its pinned reference and what its config
// says a container of it runs with.
type Image struct {
	Ref        string // repository@sha256:..., what Resolve pinned
	Digest     string // sha256:... of the linux/amd64 image manifest
	Env        []string
	Workdir    string
	User       string
	Entrypoint []string
	Cmd        []string
	Layers     int
	Cached     int // layers found in the cache
	Report     FlattenReport
}

var amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// ParseRef checks an image reference (what `from:` holds).
func ParseRef(ref string) error {
	if _, err := name.ParseReference(ref); err != nil || strings.TrimSpace(ref) != ref || ref == "" {
		return errdefs.Invalidf("image %q: want a reference such as python:3.12, registry.example.com/team/app:1.4 or one @sha256:<digest>", ref)
	}
	return nil
}

func (p *Puller) options(ctx context.Context, ref name.Reference, auth *Auth) ([]remote.Option, error) {
	if reg := ref.Context().RegistryStr(); len(p.Registries) > 0 && !p.named(reg) {
		return nil, errdefs.Invalidf("image %s: its registry %s is not one this server pulls from (--registry-allow %s)", ref, reg, strings.Join(p.Registries, ","))
	}
	a, err := p.authenticator(ref.Context().RegistryStr(), auth)
	if err != nil {
		return nil, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(a), remote.WithPlatform(amd64), remote.WithUserAgent("lizard")}
	switch {
	case p.Transport != nil:
		opts = append(opts, remote.WithTransport(p.Transport))
	case len(p.Registries) == 0:
		opts = append(opts, remote.WithTransport(publicOnly))
	}
	return opts, nil
}

// Resolve fetches ref's manifest with auth (nil: the server's config
// file's, if any) and returns its linux/amd64 image's pinned reference
// and digest.
func (p *Puller) Resolve(ctx context.Context, ref string, auth *Auth) (pinned, digest string, err error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", "", ParseRef(ref)
	}
	opts, err := p.options(ctx, r, auth)
	if err != nil {
		return "", "", err
	}
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return "", "", registryError(ref, err)
	}
	img, err := desc.Image() // an index: its linux/amd64 image
	if err != nil {
		return "", "", registryError(ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", "", registryError(ref, err)
	}
	return r.Context().Digest(d.String()).String(), d.String(), nil
}

// Pull pulls pinned (a reference by digest, from Resolve) with auth and
// unpacks it into target, an empty directory.
func (p *Puller) Pull(ctx context.Context, pinned string, auth *Auth, target string, progress func(string)) (Image, error) {
	lim := p.Limits.withDefaults()
	ref, err := name.NewDigest(pinned)
	if err != nil {
		return Image{}, errdefs.Invalidf("image %q: want a reference by digest (repository@sha256:...)", pinned)
	}
	opts, err := p.options(ctx, ref, auth)
	if err != nil {
		return Image{}, err
	}
	// The manifest always comes from the registry, with the caller's
	// credentials: it is what proves the caller may have the layers the
	// cache holds.
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return Image{}, registryError(pinned, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return Image{}, registryError(pinned, err)
	}
	if len(m.Layers) > lim.Layers {
		return Image{}, errdefs.Invalidf("image %s has %d layers; at most %d are allowed", pinned, len(m.Layers), lim.Layers)
	}
	var total int64
	for _, l := range m.Layers {
		if l.Size < 0 || len(l.URLs) > 0 {
			return Image{}, errdefs.Invalidf("image %s has a foreign layer (%s): Lizard pulls layers from the image's registry only", pinned, l.Digest)
		}
		total += l.Size
	}
	if total > lim.Bytes {
		return Image{}, errdefs.Invalidf("image %s's layers hold %d bytes compressed; at most %d are allowed", pinned, total, lim.Bytes)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, registryError(pinned, err)
	}
	out := Image{Ref: pinned, Digest: ref.DigestStr(), Layers: len(m.Layers),
		Env: cf.Config.Env, Workdir: cf.Config.WorkingDir, User: cf.Config.User, Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd}
	dir := p.scope(ref)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Image{}, fmt.Errorf("making the layer cache: %w", err)
	}
	layers := make([]Layer, len(m.Layers))
	for i, l := range m.Layers {
		file := filepath.Join(dir, l.Digest.Algorithm+"-"+l.Digest.Hex)
		if _, err := os.Stat(file); err == nil {
			out.Cached++
			now := time.Now()
			os.Chtimes(file, now, now) // used: the last to go when the cache is full
			progress(fmt.Sprintf("layer %d/%d %s: cached", i+1, len(m.Layers), short(l.Digest)))
		} else {
			progress(fmt.Sprintf("layer %d/%d %s: pulling %d bytes", i+1, len(m.Layers), short(l.Digest), l.Size))
			if err := p.fetch(img, l, file); err != nil {
				if ctx.Err() != nil {
					return Image{}, ctx.Err()
				}
				return Image{}, registryError(pinned, err)
			}
		}
		layers[i] = func() (io.ReadCloser, error) {
			tl, err := tarball.LayerFromFile(file)
			if err != nil {
				return nil, err
			}
			return tl.Uncompressed() // gzip, zstd or plain, by its first bytes
		}
	}
	progress("unpacking " + fmt.Sprint(len(layers)) + " layer(s)")
	out.Report, err = Flatten(ctx, target, layers, lim)
	if err != nil {
		return Image{}, err
	}
	p.prune()
	return out, nil
}

func short(h v1.Hash) string { return h.Hex[:12] }

// scope is the cache directory of ref's repository.
func (p *Puller) scope(ref name.Reference) string {
	sum := sha256.Sum256([]byte(ref.Context().Name()))
	return filepath.Join(p.Dir, "blobs", hex.EncodeToString(sum[:8]))
}

// fetch downloads layer l of img into file: to a temporary file first,
// renamed when all of it came and its digest checked (the remote layer's
// reader checks it at EOF), so the cache never holds part of a layer.
func (p *Puller) fetch(img v1.Image, l v1.Descriptor, file string) error {
	layer, err := img.LayerByDigest(l.Digest)
	if err != nil {
		return err
	}
	rc, err := layer.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(file), ".pull-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// A registry may send more than the manifest says: no more is kept.
	n, err := io.Copy(tmp, io.LimitReader(rc, l.Size+1))
	if err = errors.Join(err, tmp.Close()); err != nil {
		return err
	}
	if n != l.Size {
		return fmt.Errorf("layer %s: the registry sent %d bytes, the manifest says %d", l.Digest, n, l.Size)
	}
	return os.Rename(tmp.Name(), file)
}

// prune removes the layers used longest ago while the cache holds more
// than its bound.
func (p *Puller) prune() {
	bound := p.CacheBytes
	if bound == 0 {
		bound = MaxCacheBytes
	}
	type blob struct {
		path string
		size int64
		used time.Time
	}
	var blobs []blob
	var total int64
	filepath.WalkDir(filepath.Join(p.Dir, "blobs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			blobs = append(blobs, blob{path, fi.Size(), fi.ModTime()})
			total += fi.Size()
		}
		return nil
	})
	slices.SortFunc(blobs, func(a, b blob) int { return a.used.Compare(b.used) })
	for _, b := range blobs {
		if total <= bound {
			return
		}
		if os.Remove(b.path) == nil {
			total -= b.size
		}
	}
}

// registryError says what a registry's failure means for the build.
func registryError(ref string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return &errdefs.Error{Kind: errdefs.ErrInvalid, Cause: err,
				Msg: fmt.Sprintf("the registry refused image %s (HTTP %d): give credentials that may pull it (lizard template build --registry-username/--registry-password, the API's registry field, or the server's --registry-config)", ref, te.StatusCode)}
		case http.StatusNotFound:
			return &errdefs.Error{Kind: errdefs.ErrInvalid, Cause: err,
				Msg: fmt.Sprintf("image %s is not in its registry: check the repository, tag or digest", ref)}
		}
	}
	var e *errdefs.Error
	if errors.As(err, &e) {
		return err
	}
	if strings.Contains(err.Error(), "no child with platform") {
		return &errdefs.Error{Kind: errdefs.ErrInvalid, Cause: err,
			Msg: fmt.Sprintf("image %s has no linux/amd64 image, the only platform Lizard runs", ref)}
	}
	return &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
		Msg: fmt.Sprintf("pulling image %s failed: %v; retry when its registry answers", ref, err)}
}

// authenticator is auth, else the config file's entry for registry,
// else anonymous.
func (p *Puller) authenticator(registry string, auth *Auth) (authn.Authenticator, error) {
	if auth != nil && (auth.Username != "" || auth.Password != "") {
		return authn.FromConfig(authn.AuthConfig{Username: auth.Username, Password: auth.Password}), nil
	}
	if p.ConfigFile == "" {
		return authn.Anonymous, nil
	}
	a, err := fromConfigFile(p.ConfigFile, registry)
	if err != nil {
		// The file's content is never in the message: it holds secrets.
		return nil, fmt.Errorf("reading registry credentials from %s: %w", p.ConfigFile, err)
	}
	return a, nil
}

// dockerConfig is the part of a docker config.json that names
// credentials. Credential helpers (credsStore, credHelpers) are not run:
// they are programs.
type dockerConfig struct {
	Auths map[string]struct {
		Auth          string `json:"auth"`
		Username      string `json:"username"`
		Password      string `json:"password"`
		IdentityToken string `json:"identitytoken"`
	} `json:"auths"`
}

func fromConfigFile(file, registry string) (authn.Authenticator, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var c dockerConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, errors.New("not a docker config.json")
	}
	keys := []string{registry, "https://" + registry, "http://" + registry}
	if registry == name.DefaultRegistry {
		keys = append(keys, "https://index.docker.io/v1/", "index.docker.io", "docker.io")
	}
	for k, e := range c.Auths {
		if !slices.Contains(keys, strings.TrimSuffix(k, "/")) && !slices.Contains(keys, k) {
			continue
		}
		cfg := authn.AuthConfig{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken}
		if e.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(e.Auth)
			user, pass, ok := strings.Cut(string(dec), ":")
			if err != nil || !ok {
				return nil, fmt.Errorf("the entry for %s has an auth that is not base64 of user:password", k)
			}
			cfg.Username, cfg.Password = user, pass
		}
		return authn.FromConfig(cfg), nil
	}
	return authn.Anonymous, nil
}

// named reports whether Registries names registry: as it is, by its host
// alone (any port), or as docker.io for Docker Hub.
func (p *Puller) named(registry string) bool {
	host, _, err := net.SplitHostPort(registry)
	if err != nil {
		host = registry
	}
	return slices.Contains(p.Registries, registry) || slices.Contains(p.Registries, host) ||
		(registry == name.DefaultRegistry && slices.Contains(p.Registries, "docker.io"))
}

// publicOnly is the transport of pulls from registries no operator named:
// its connections go only to addresses a sandbox with internet access may
// reach (netns.Reachable), checked on the address dialled, after any
// resolution or redirect (a registry's blobs are often served elsewhere).
var publicOnly http.RoundTripper = func() http.RoundTripper {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !netns.Reachable(ap.Addr(), nil, nil) {
				return errdefs.Invalidf("a registry at %s: this server pulls from loopback, private and special-purpose addresses only from registries --registry-allow names", address)
			}
			return nil
		}}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = d.DialContext
	t.Proxy = nil // a proxy would dial for it, where Control does not look
	return t
}()
