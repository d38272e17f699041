package e2b

// E2B's template steps as a Lizard recipe. The SDK sends five kinds of
// step (COPY, RUN, ENV, WORKDIR, USER); its other calls are RUN commands
// it writes itself — pip_install, apt_install, npm_install, make_symlink,
// make_dir, remove... — and from_dockerfile is parsed by the SDK into
// these same steps. A Lizard build has no network, and fetches pip,
// Debian and npm packages on the host instead: the commands pip_install,
// apt_install and npm_install (bun_install) write are recognised and
// become pip, apt and npm steps.

import (
	"archive/tar"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/e2b/uploads"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// templateStart is E2B's TemplateBuildStartV2.
type templateStart struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry"`
	// Force is skip_cache: every step runs again (SkipCache). A step's
	// own force (skip_cache() before it) skips the cache from there on,
	// which Lizard does for the whole build.
	Force    bool           `json:"force"`
	Steps    []templateStep `json:"steps"`
	StartCmd string         `json:"startCmd"`
	ReadyCmd string         `json:"readyCmd"`
}

// templateStep is E2B's TemplateStep.
type templateStep struct {
	Type        string   `json:"type"`
	Args        []string `json:"args"`
	FilesHash   string   `json:"filesHash"`
	Force       bool     `json:"force"`
	ForceUpload *bool    `json:"forceUpload"`
}

// e2bBaseImages are E2B's own base images, which stand for Lizard's
// interpreter template as E2B's base template does.
var e2bBaseImages = []string{"e2bdev/base", "e2bdev/base:latest", "docker.io/e2bdev/base", "docker.io/e2bdev/base:latest"}

// recipeOf translates start into a recipe of project's, reading the
// files its copy steps uploaded.
func (h *Handler) recipeOf(project string, start templateStart) (api.TemplateRecipe, *api.RegistryAuth, error) {
	var r api.TemplateRecipe
	var auth *api.RegistryAuth
	switch {
	case start.FromTemplate != "" && !builtIn(start.FromTemplate):
		// One of the project's templates: its recipe comes first
		// (control's onTemplate), its build resumed from.
		name, tag := splitName(start.FromTemplate)
		if tag != "" && tag != defaultTag {
			return r, nil, badRequest("from_template(%q): Lizard builds on a template's current build, not on a tag of it: from_template(%q)", start.FromTemplate, name)
		}
		r.Base = name
	case start.FromTemplate != "":
		r.Base = "interpreter"
	case start.FromImage == "" || slices.Contains(e2bBaseImages, start.FromImage):
		r.Base = "interpreter"
	default:
		var err error
		if auth, err = fromImage(&r, start.FromImage, start.FromImageRegistry); err != nil {
			return r, nil, err
		}
	}
	t := translation{h: h, project: project, user: e2bDefaultUser}
	if r.From != "" {
		// E2B's builds make its default user in an image that has none,
		// as Lizard's sandboxes need it (uid 1000).
		t.add(api.TemplateStep{Run: &api.TemplateCommand{User: "root", Cmd: ensureUser}})
	}
	// E2B's builds start as its default user, in that user's home.
	t.add(api.TemplateStep{User: e2bDefaultUser})
	t.add(api.TemplateStep{Workdir: home(e2bDefaultUser)})
	for i, s := range start.Steps {
		if err := t.step(s); err != nil {
			return r, nil, inStep(fmt.Sprintf("step %d (%s %s): ", i+1, s.Type, strings.Join(s.Args, " ")), err)
		}
	}
	r.Steps = t.steps
	r.Start, r.Ready = start.StartCmd, start.ReadyCmd
	return r, auth, nil
}

// inStep prefixes err's message, which the caller is shown, with the step
// it is about.
func inStep(prefix string, err error) error {
	var he *httpError
	if errors.As(err, &he) {
		return &httpError{status: he.status, msg: prefix + he.msg}
	}
	var e *errdefs.Error
	if errors.As(err, &e) {
		return &errdefs.Error{Kind: e.Kind, Msg: prefix + errdefs.Message(err), Cause: err}
	}
	return fmt.Errorf("%s%w", prefix, err)
}

// ensureUser makes the user uid 1000 with its home where an image has
// none: with useradd (Debian, Ubuntu, Fedora), busybox's adduser
// (Alpine), or by hand.
const ensureUser = `id -u user >/dev/null 2>&1 || useradd -m -u 1000 -s /bin/sh user 2>/dev/null || adduser -D -u 1000 user 2>/dev/null || ` +
	`{ echo 'user:x:1000:1000::/home/user:/bin/sh' >>/etc/passwd && echo 'user:x:1000:' >>/etc/group && mkdir -p /home/user && chown 1000:1000 /home/user; }`

// gcpJSONKeyUser is the user Google's registries take a service
// account's JSON key as the password of.
const gcpJSONKeyUser = "_json_key"

// e2bDefaultUser is the user E2B's builds run as until a USER step.
const e2bDefaultUser = "user"

func home(user string) string {
	if user == "root" {
		return "/root"
	}
	return "/home/" + user
}

// translation is the recipe's steps as they are made, with what earlier
// steps set that later ones read.
type translation struct {
	h       *Handler
	project string
	steps   []api.TemplateStep
	user    string
	workdir string // "": the user's home, as E2B's
}

func (t *translation) add(s api.TemplateStep) { t.steps = append(t.steps, s) }

func (t *translation) dir() string {
	if t.workdir != "" {
		return t.workdir
	}
	return home(t.user)
}

// twoUsers says why a step may not name another user, and what to do.
const twoUsers = "a Lizard sandbox has two users, root and user (uid 1000); run as another with su or setpriv in a command"

// lizardUser checks that user is one a Lizard template runs as.
func lizardUser(user string) error {
	if user != "root" && user != "user" {
		return badRequest("user %q: %s", user, twoUsers)
	}
	return nil
}

var (
	// What apt_install writes (both SDKs).
	aptCmd = regexp.MustCompile(`^apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y (?:--no-install-recommends )?(?:--fix-missing )?([^&|;<>$` + "`" + `]+)$`)
	// What pip_install writes, with packages (none: pip install .).
	pipCmd = regexp.MustCompile(`^pip install (?:--user )?([^&|;<>$` + "`" + `]+)$`)
	// What npm_install and bun_install write with packages.
	npmCmd = regexp.MustCompile(`^(npm|bun) install( -g)?( --save-dev| --dev)?((?: [^\s&|;<>$` + "`" + `]+)+)$`)
)

func (t *translation) step(s templateStep) error {
	switch strings.ToUpper(s.Type) {
	case "RUN":
		if len(s.Args) < 1 || strings.TrimSpace(s.Args[0]) == "" {
			return badRequest("RUN needs a command")
		}
		cmd, user := s.Args[0], t.user
		if len(s.Args) > 1 && s.Args[1] != "" {
			user = s.Args[1]
		}
		if err := lizardUser(user); err != nil {
			// In envd's words first, as E2B's build fails a RUN as a user
			// the image lacks (its SDKs' tests match them), then Lizard's.
			return badRequest("failed to run command '%s': command failed: unauthenticated: invalid username: '%s': %s", cmd, user, twoUsers)
		}
		if m := aptCmd.FindStringSubmatch(cmd); m != nil {
			t.add(api.TemplateStep{Apt: strings.Fields(m[1])})
			return nil
		}
		if m := pipCmd.FindStringSubmatch(cmd); m != nil && m[1] != "." {
			t.add(api.TemplateStep{Pip: strings.Fields(m[1])})
			return nil
		}
		if m := npmCmd.FindStringSubmatch(cmd); m != nil {
			// bun's too: its packages are npm's, laid out as npm does.
			t.add(api.TemplateStep{Npm: &api.TemplateNpm{Packages: strings.Fields(m[4]), Global: m[2] != "", Dev: m[3] != ""}})
			return nil
		}
		t.add(api.TemplateStep{Run: &api.TemplateCommand{Cmd: cmd, User: user}})
	case "ENV":
		if len(s.Args) == 0 || len(s.Args)%2 != 0 {
			return badRequest("ENV needs names and values in pairs")
		}
		env := map[string]string{}
		for i := 0; i < len(s.Args); i += 2 {
			env[s.Args[i]] = s.Args[i+1]
		}
		t.add(api.TemplateStep{Env: env})
	case "WORKDIR":
		if len(s.Args) < 1 || s.Args[0] == "" {
			return badRequest("WORKDIR needs a path")
		}
		dir := s.Args[0]
		if !path.IsAbs(dir) {
			// Relative to the last WORKDIR, else to /, as E2B's.
			dir = path.Join(cmp(t.workdir, "/"), dir)
		}
		t.workdir = path.Clean(dir)
		t.add(api.TemplateStep{Workdir: t.workdir})
	case "USER":
		if len(s.Args) < 1 {
			return badRequest("USER needs a user")
		}
		if err := lizardUser(s.Args[0]); err != nil {
			return err
		}
		t.user = s.Args[0]
		t.add(api.TemplateStep{User: t.user})
		if t.workdir == "" {
			t.add(api.TemplateStep{Workdir: home(t.user)})
		}
	case "COPY":
		return t.copy(s)
	default:
		return badRequest("step type %q is not one of E2B's (COPY, RUN, ENV, WORKDIR, USER)", s.Type)
	}
	return nil
}

func cmp(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// copy is a COPY step: the files the SDK uploaded under its hash, checked
// against it, put where E2B's build puts them — src's files (less the
// path up to its first glob) under dest, or src alone as dest (inside
// dest, when it ends with /), relative paths from the working directory.
func (t *translation) copy(s templateStep) error {
	if len(s.Args) < 2 {
		return badRequest("COPY needs a source and a destination")
	}
	src, dest := s.Args[0], s.Args[1]
	if t.h.uploads == nil {
		return &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "this server takes no file uploads for templates (it has no upload store): copy files in with Lizard's POST /v1/templates"}
	}
	if err := uploads.ValidHash(s.FilesHash); err != nil {
		return err
	}
	entries, err := t.h.uploads.Read(t.project, s.FilesHash)
	if err != nil {
		return err
	}
	if got := uploads.FilesHash(src, dest, entries); got != s.FilesHash && !holdsDir(entries) {
		return badRequest("the files uploaded for it do not match its hash %s (they hash to %s): upload them again (copy(..., force_upload=True))", s.FilesHash, got)
	}
	owner := t.user
	if len(s.Args) > 2 && s.Args[2] != "" {
		u, g, _ := strings.Cut(s.Args[2], ":")
		if g != "" && g != u {
			return badRequest("owner %q: a Lizard template's files are root's or user's, each in its own group", s.Args[2])
		}
		owner = u
	}
	if err := lizardUser(owner); err != nil {
		return err
	}
	var mode int64 = -1
	if len(s.Args) > 3 && s.Args[3] != "" {
		m, err := strconv.ParseInt(s.Args[3], 8, 32)
		if err != nil || m < 0 || m > 0o7777 {
			return badRequest("mode %q: want octal permission bits", s.Args[3])
		}
		mode = m & 0o777
	}
	if !path.IsAbs(dest) {
		dest = path.Join(t.dir(), dest) + map[bool]string{true: "/"}[strings.HasSuffix(dest, "/")]
	}
	base := globBase(src)
	under := func(name string) (string, bool) {
		if base == "." {
			return name, true
		}
		rel, ok := strings.CutPrefix(name, base+"/")
		return rel, ok
	}
	// src names a directory when entries are under it (a glob's base
	// always is one); else the one entry at it.
	isDir := base == "." || slices.ContainsFunc(entries, func(e uploads.Entry) bool { _, ok := under(e.Name); return ok })
	target := func(e uploads.Entry) (string, bool) {
		if isDir {
			rel, ok := under(e.Name)
			return path.Join(dest, rel), ok
		}
		if e.Name != base {
			return "", false
		}
		if strings.HasSuffix(dest, "/") {
			return path.Join(dest, path.Base(base)), true
		}
		return path.Clean(dest), true
	}
	var files []api.TemplateFile
	var links []api.TemplateStep
	var dirs []string
	for _, e := range entries {
		p, ok := target(e)
		if !ok {
			continue
		}
		switch e.Type {
		case tar.TypeReg:
			m := e.Mode & 0o777
			if mode >= 0 {
				m = mode
			}
			if m == 0 {
				m = 0o400 // 0 would be taken as the default, 0644
			}
			files = append(files, api.TemplateFile{Path: p, Content: base64.StdEncoding.EncodeToString(e.Content), Mode: m, Owner: owner})
		case tar.TypeSymlink:
			links = append(links, api.TemplateStep{Symlink: &api.TemplateSymlink{Target: e.Linkname, Path: p}})
		case tar.TypeDir:
			dirs = append(dirs, p)
		}
	}
	if len(files)+len(links)+len(dirs) == 0 {
		return badRequest("the files uploaded for it hold nothing at %s", src)
	}
	if len(dirs) > 0 {
		// Directories, empty ones too, made as E2B's copy makes them.
		q := make([]string, len(dirs))
		for i, d := range dirs {
			q[i] = shellQuote(d)
		}
		cmd := "mkdir -p " + strings.Join(q, " ")
		if owner != "root" {
			cmd += " && chown " + owner + ":" + owner + " " + strings.Join(q, " ")
		}
		t.add(api.TemplateStep{Run: &api.TemplateCommand{Cmd: cmd, User: "root"}})
	}
	if len(files) > 0 {
		t.add(api.TemplateStep{Copy: files})
	}
	for _, l := range links {
		t.add(l)
	}
	return nil
}

// holdsDir reports whether entries hold a directory, whose files hash
// the server cannot check: E2B's JavaScript SDK (to 2.51 at least) hashes
// each directory's size on the user's disk (4096 on ext4, other figures
// elsewhere), which no tar records. Such a copy is taken unchecked. The
// hash is only the name the project's own client files its upload under
// (the store keys it by project), and a build is cached by the files it
// was given, not by that name: an upload that lies about its hash builds
// the project's template from the files it sent — which any key of the
// project could build anyway — and reaches no other project or build.
// What is lost is the check of a project's own mistaken upload; a copy
// of files alone (Python's SDK, a JavaScript glob of files) is checked.
func holdsDir(entries []uploads.Entry) bool {
	return slices.ContainsFunc(entries, func(e uploads.Entry) bool { return e.Type == tar.TypeDir })
}

// globBase is the part of an E2B copy's source before its first glob, as
// E2B's build takes it (doublestar.SplitPattern of src + "/").
func globBase(src string) string {
	parts := strings.Split(path.Clean(src), "/")
	for i, p := range parts {
		if strings.ContainsAny(p, "*?[{\\") {
			if i == 0 {
				return "."
			}
			return strings.Join(parts[:i], "/")
		}
	}
	return path.Clean(src)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// fromImage makes image (from_image, from_dockerfile's FROM) r's base,
// pulled with registry's credentials (from_image(..., username,
// password)): used for the build, kept nowhere.
func fromImage(r *api.TemplateRecipe, image string, registry json.RawMessage) (*api.RegistryAuth, error) {
	r.From = image
	if len(registry) == 0 || string(registry) == "null" {
		return nil, nil
	}
	var reg struct {
		Type               string `json:"type"`
		Username           string `json:"username"`
		Password           string `json:"password"`
		ServiceAccountJSON string `json:"serviceAccountJson"`
	}
	if err := json.Unmarshal(registry, &reg); err != nil {
		return nil, badRequest("fromImageRegistry: %v", err)
	}
	switch reg.Type {
	case "registry":
		if reg.Username == "" || reg.Password == "" {
			return nil, badRequest("fromImageRegistry: a registry's username and password are both needed")
		}
		return &api.RegistryAuth{Username: reg.Username, Password: reg.Password}, nil
	case "gcp":
		// Google's registries take a service account's JSON key as the
		// password of the user _json_key (as E2B's build logs in,
		// go-containerregistry's google.NewJSONKeyAuthenticator): no
		// Google API is called, so any registry taking that login works.
		var key map[string]any
		if err := json.Unmarshal([]byte(reg.ServiceAccountJSON), &key); err != nil || len(key) == 0 {
			return nil, badRequest("from_gcp_registry: the service account's JSON key (serviceAccountJson) is not a JSON object: give the key file gcloud iam service-accounts keys create wrote")
		}
		return &api.RegistryAuth{Username: gcpJSONKeyUser, Password: reg.ServiceAccountJSON}, nil
	case "aws":
		return nil, notImplemented("from_aws_registry: Lizard does not call AWS's ECR token API (GetAuthorizationToken) for a pull; " +
			"give the token as a password instead: from_image(image, username=\"AWS\", password=$(aws ecr get-login-password --region REGION)), or set the registry in the server's --registry-config")
	}
	return nil, badRequest("fromImageRegistry.type %q: want registry, aws or gcp", reg.Type)
}
