// Package recipe builds custom templates (docs/templates.md): a recipe on
// top of a built-in base template — Debian packages, pip packages, files,
// envs, a working directory, build commands and a start command — made into
// a root filesystem of its own in the template cache, keyed by the hash of
// the recipe and its base.
//
// Recipe code never runs on the host. Packages are fetched on the host
// without running any of their code (pip download of wheels only, apt's
// download-only), then a build sandbox boots a private copy of the base's
// root filesystem writable (gVisor's gofer writes it; the sandbox's root is
// not the host's), with no network egress, and the steps run in it through
// its agent. The sandbox is stopped and the copy, stripped of set-id bits
// and special files (template.Strip) and moved into place, is the new
// template's root filesystem. A step that fails fails the build, with
// its output, and the copy is removed.
package recipe

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/oci"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/template"
)

// Bounds on a recipe.
const (
	MaxFileBytes  = 16 << 20 // all files together, decoded
	MaxPackages   = 200      // apt, pip and npm each
	MaxCommands   = 100      // build commands: run and run steps
	MaxFiles      = 10000    // files and copy steps' files
	MaxSteps      = 500
	MaxEnvs       = 100
	MaxStartBytes = 4096
	MaxNameLen    = 63
)

// formatVersion is part of every key: bump it when what a build makes of
// the same recipe changes. (What is done to every build before it is
// published, template.PublishVersion, is part of the key too.)
const formatVersion = "lizard-custom-template-v2"

var (
	nameRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	// Debian package names (policy 5.6.1), optionally =version.
	aptRe = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$`)
	// A pip requirement: a name, extras, and version specifiers; no URLs,
	// paths or options, which could point pip anywhere.
	// An npm registry package: a name (scoped or not), optionally
	// @version, range or tag; no URLs, paths, git or npm: aliases, which
	// would fetch from anywhere or run git on the host.
	npmRe = regexp.MustCompile(`^(@[A-Za-z0-9][A-Za-z0-9._~-]*/)?[A-Za-z0-9][A-Za-z0-9._~-]*(@[A-Za-z0-9.^~<>=*|+_-]+)?$`)
	pipRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._,-]+\])?\s*((==|>=|<=|!=|~=|>|<|===)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*$`)
	envRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ValidName checks a template's name.
func ValidName(name string) error {
	if !nameRe.MatchString(name) {
		return errdefs.Invalidf("name %q: want 1 to %d lower-case letters, digits and dashes, starting and ending with a letter or digit", name, MaxNameLen)
	}
	return nil
}

// Validate checks r, whose base must be one of bases, and fills in its
// defaults (base, file modes and owners, command users). Bounds count the
// fixed parts and the steps together.
func Validate(r *api.TemplateRecipe, bases []string) error {
	if r.From != "" {
		if err := validateFrom(r); err != nil {
			return err
		}
	} else if r.Base == "" {
		r.Base = bases[0]
	}
	if r.From == "" && !slices.Contains(bases, r.Base) {
		return errdefs.Invalidf("recipe.base %q: a custom template is built on a built-in template: %s", r.Base, strings.Join(bases, ", "))
	}
	var t tally
	if err := t.packages("recipe", r.Apt, r.Pip); err != nil {
		return err
	}
	if err := t.files("recipe.files", r.Files, "user"); err != nil {
		return err
	}
	if err := t.env("recipe.env", r.Env); err != nil {
		return err
	}
	if r.Workdir != "" {
		if err := checkPath("recipe.workdir", r.Workdir, false); err != nil {
			return err
		}
		r.Workdir = path.Clean(r.Workdir)
	}
	for i := range r.Run {
		if err := t.command(fmt.Sprintf("recipe.run[%d]", i), &r.Run[i], "root"); err != nil {
			return err
		}
	}
	if err := validateSteps(r, &t); err != nil {
		return err
	}
	if t.fileBytes > MaxFileBytes {
		return errdefs.Invalidf("recipe's files hold %d bytes; at most %d are allowed (install large data at run time)", t.fileBytes, MaxFileBytes)
	}
	for _, c := range []struct{ field, cmd string }{{"start", r.Start}, {"ready", r.Ready}} {
		if len(c.cmd) > MaxStartBytes || strings.ContainsRune(c.cmd, 0) {
			return errdefs.Invalidf("recipe.%s: want a shell command of at most %d bytes", c.field, MaxStartBytes)
		}
	}
	return nil
}

// tally counts what a recipe holds against its bounds, across the fixed
// parts and the steps.
type tally struct {
	apt, pip, npm, nfiles int
	commands              int
	fileBytes             int
	envs                  map[string]bool
}

func (t *tally) packages(field string, apt, pip []string) error {
	t.apt += len(apt)
	t.pip += len(pip)
	if t.apt > MaxPackages || t.pip > MaxPackages {
		return errdefs.Invalidf("%s: at most %d apt and %d pip packages in all", field, MaxPackages, MaxPackages)
	}
	for _, p := range apt {
		if !aptRe.MatchString(p) {
			return errdefs.Invalidf("%s.apt %q: want a Debian package name, optionally with =version", field, p)
		}
	}
	for _, p := range pip {
		if !pipRe.MatchString(p) || strings.HasPrefix(p, "-") {
			return errdefs.Invalidf("%s.pip %q: want a requirement such as requests or requests==2.32.3 (no URLs, paths or options)", field, p)
		}
	}
	return nil
}

// npmPackages checks an npm step's packages, counting them.
func (t *tally) npmPackages(field string, pkgs []string) error {
	if len(pkgs) == 0 {
		return errdefs.Invalidf("%s.packages: name at least one package", field)
	}
	t.npm += len(pkgs)
	if t.npm > MaxPackages {
		return errdefs.Invalidf("%s: at most %d npm packages in all", field, MaxPackages)
	}
	for _, p := range pkgs {
		if len(p) > 214+64 || !npmRe.MatchString(p) {
			return errdefs.Invalidf("%s.packages %q: want a registry package such as lodash, @types/node@20 or typescript@^5 (no URLs, paths, git or aliases)", field, p)
		}
	}
	return nil
}

// files checks files (field names them), cleans their paths and fills in
// their defaults; owner is the default owner.
func (t *tally) files(field string, files []api.TemplateFile, owner string) error {
	t.nfiles += len(files)
	if t.nfiles > MaxFiles {
		return errdefs.Invalidf("%s: the recipe holds %d files; at most %d are allowed", field, t.nfiles, MaxFiles)
	}
	seen := map[string]bool{}
	for i := range files {
		f := &files[i]
		if err := checkPath(fmt.Sprintf("%s[%d].path", field, i), f.Path, true); err != nil {
			return err
		}
		f.Path = path.Clean(f.Path)
		if seen[f.Path] {
			return errdefs.Invalidf("%s: %s is given twice", field, f.Path)
		}
		seen[f.Path] = true
		data, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			return errdefs.Invalidf("%s[%d].content: not base64: %v", field, i, err)
		}
		t.fileBytes += len(data)
		f.Size = int64(len(data))
		if f.Mode == 0 {
			f.Mode = 0o644
		}
		if f.Mode < 0 || f.Mode > 0o777 {
			return errdefs.Invalidf("%s[%d].mode %o: want permission bits, 0 to 0777", field, i, f.Mode)
		}
		switch f.Owner {
		case "":
			f.Owner = owner
		case "user", "root":
		default:
			return errdefs.Invalidf("%s[%d].owner %q: want user or root", field, i, f.Owner)
		}
	}
	return nil
}

func (t *tally) env(field string, env map[string]string) error {
	if t.envs == nil {
		t.envs = map[string]bool{}
	}
	for k, v := range env {
		t.envs[k] = true
		if !envRe.MatchString(k) || strings.HasPrefix(k, "LIZARD_") {
			return errdefs.Invalidf("%s name %q: want letters, digits and _, not starting with a digit nor LIZARD_", field, k)
		}
		if strings.ContainsRune(v, 0) {
			return errdefs.Invalidf("%s %s: values cannot hold NUL bytes", field, k)
		}
	}
	if len(t.envs) > MaxEnvs {
		return errdefs.Invalidf("%s: the recipe sets %d variables; at most %d are allowed", field, len(t.envs), MaxEnvs)
	}
	return nil
}

// command checks c and fills in its user (user when it names none).
func (t *tally) command(field string, c *api.TemplateCommand, user string) error {
	t.commands++
	if t.commands > MaxCommands {
		return errdefs.Invalidf("%s: the recipe has more than %d commands", field, MaxCommands)
	}
	if strings.TrimSpace(c.Cmd) == "" || strings.ContainsRune(c.Cmd, 0) {
		return errdefs.Invalidf("%s.cmd is empty (or holds NUL): want a shell command", field)
	}
	switch c.User {
	case "":
		c.User = user
	case "root", "user":
	default:
		return errdefs.Invalidf("%s.user %q: want root (the sandbox's) or user", field, c.User)
	}
	return nil
}

// validateFrom checks a recipe built on an image. Its packages cannot be
// fetched on the host as a built-in base's are: what apt and pip would
// read of the base (its Debian release and dpkg status, its Python) is
// the image's, not a trusted base's, and the build sandbox has no network.
// The image brings its packages.
func validateFrom(r *api.TemplateRecipe) error {
	if len(r.From) > 4096 {
		return errdefs.Invalidf("recipe.from: at most 4096 bytes")
	}
	if err := oci.ParseRef(r.From); err != nil {
		return errdefs.Invalidf("recipe.from: %v", err)
	}
	switch {
	case r.Base != "":
		return errdefs.Invalidf("recipe.base %q and recipe.from %q: a template is built on a built-in template or on an image, not both", r.Base, r.From)
	case len(r.Apt)+len(r.Pip) > 0:
		return errdefs.Invalidf("recipe.apt and recipe.pip are for built-in bases: a template built on an image (recipe.from) gets its packages from the image; install them there")
	}
	for i, s := range r.Steps {
		if len(s.Apt)+len(s.Pip) > 0 || s.Npm != nil {
			return errdefs.Invalidf("recipe.steps[%d]: apt, pip and npm steps are for built-in bases: a template built on an image (recipe.from) gets its packages from the image; install them there", i)
		}
	}
	return nil
}

// reserved are the paths the runtime provides (mounts, Lizard's own
// files): a recipe cannot put anything there.
var reserved = []string{"/proc", "/sys", "/dev", "/tmp", "/opt/lizard/bin", "/usr/local/bin/lizard"}

// checkPath checks p, which Validate then cleans: the build uses the
// clean path, so that what was checked is what is written. A file
// (isFile) may not be an ancestor of a reserved path either: it would
// replace a directory Lizard's files are mounted in.
func checkPath(field, p string, isFile bool) error {
	if !path.IsAbs(p) || path.Clean(p) == "/" || strings.ContainsRune(p, 0) || len(p) > 4096 {
		return errdefs.Invalidf("%s %q: want an absolute path inside the template, such as /home/user/data.csv", field, p)
	}
	c := path.Clean(p)
	for _, bad := range reserved {
		if c == bad || strings.HasPrefix(c, bad+"/") {
			return errdefs.Invalidf("%s %q: %s is provided at run time, not by the template", field, p, bad)
		}
		if isFile && strings.HasPrefix(bad, c+"/") {
			return errdefs.Invalidf("%s %q: a file cannot replace %s, which holds %s, provided at run time", field, p, c, bad)
		}
	}
	return nil
}

// reservedPattern is reserved as a shell case pattern: the paths and
// everything below them.
func reservedPattern() string {
	var alts []string
	for _, r := range reserved {
		alts = append(alts, r, r+"/*")
	}
	return strings.Join(alts, "|")
}

// ImageBaseKey is what Key takes as the base key of a recipe built on an
// image: the digest its from resolved to, so that the key of a recipe
// whose tag moved is a new build.
func ImageBaseKey(digest string) string { return "image " + digest }

// Key is the cache key of projectID's recipe r (validated) built on a base
// whose artifact key is baseKey (ImageBaseKey for an image's): it changes with the project, the recipe,
// the files' contents and the base. The project is in it so that projects
// never share a build: a shared one would tell a project, by a build
// answered from the cache, that another built the same recipe, and so
// whether a guess at another's file contents (a key, a password) is right.
func Key(projectID string, r api.TemplateRecipe, baseKey string) string {
	b, _ := json.Marshal(r) // map keys sorted, struct fields in order
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\nbase %s\nproject %s\n", formatVersion, template.PublishVersion, baseKey, projectID)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// FreshKey is the key of a build of key's recipe made again at at
// (a build that skipped the cache, api.BuildTemplateRequest.SkipCache):
// apart from key's, and found again from the template's record, whose
// creation time is at.
func FreshKey(key string, at time.Time) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s fresh %d", key, at.UnixMilli()))
	return hex.EncodeToString(sum[:])[:16]
}

// LayerKey is the template cache directory name of a build of key.
func LayerKey(key string) string { return "custom-" + key }

// Stored strips file contents from r, for records and responses.
func Stored(r api.TemplateRecipe) api.TemplateRecipe {
	r.Files = slices.Clone(r.Files)
	for i := range r.Files {
		r.Files[i].Content = ""
	}
	return r
}

// Artifact returns the build of custom template reference ref (Ref) in
// cacheDir's template cache, if it is there.
func Artifact(cacheDir, ref string) (sandbox.Artifact, error) {
	name, key, ok := template.SplitRef(ref)
	if !ok {
		return sandbox.Artifact{}, fmt.Errorf("%q is not a custom template reference", ref)
	}
	rootfs, built := template.LayerRootFS(cacheDir, LayerKey(key))
	if !built {
		return sandbox.Artifact{}, fmt.Errorf("custom template %s: its build %s is not in the template cache %s (deleted?); build it again", name, LayerKey(key), cacheDir)
	}
	return sandbox.Artifact{Name: name, Key: LayerKey(key), RootFS: rootfs}, nil
}
