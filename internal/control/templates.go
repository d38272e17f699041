package control

// Custom templates (docs/templates.md): built per project from a recipe by
// the Builder — the node's under `lizard serve`, one node's in a cluster
// (cluster.Templates), recorded in the store, and named by creates. A
// sandbox records its template's reference (recipe.Ref: name@key), so a
// rebuild under the same name never changes what a running, paused or
// snapshotted sandbox boots from; a build stays in the cache while any
// record, live sandbox or snapshot refers to it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	regname "github.com/google/go-containerregistry/pkg/name"
	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// TemplateBuilder builds custom templates; *recipe.Builder is one.
type TemplateBuilder interface {
	// BaseKey is built-in template base's key (part of a recipe's),
	// waiting while it builds.
	BaseKey(ctx context.Context, base string) (string, error)
	Build(ctx context.Context, projectID string, r api.TemplateRecipe, key string, emit func(api.TemplateBuildEvent)) (recipe.Result, error)
	// Hold records that this server refers to key's build; Release drops
	// that and removes the build unless another server holds it.
	Hold(key string) error
	Release(key string) (removed bool, err error)
}

var _ TemplateBuilder = (*recipe.Builder)(nil)

// ImageResolver is a TemplateBuilder that builds templates on images
// (a recipe's from): *recipe.Builder is one. ResolveImage pins an image
// reference to its linux/amd64 image's digest, with the build's
// credentials (nil: the server's).
type ImageResolver interface {
	ResolveImage(ctx context.Context, ref string, auth *api.RegistryAuth) (pinned, digest string, err error)
}

var _ ImageResolver = (*recipe.Builder)(nil)

// StepForgetter is a TemplateBuilder whose step cache (recipe.StepCache)
// is the server's own: a deleted template's entries leave it at once.
// *recipe.Builder is one; a cluster's nodes sweep theirs at start.
type StepForgetter interface {
	ForgetSteps(projectID, name string) error
}

var _ StepForgetter = (*recipe.Builder)(nil)

// TemplateBuild is a checked request to build a template; Run builds it.
type TemplateBuild struct {
	c         *Control
	projectID string
	name      string
	recipe    api.TemplateRecipe
	key       string
	// An image base's digest and pinned reference (the from the builder
	// pulls), and the credentials that pull it: used, never recorded.
	digest, pinned string
	auth           *api.RegistryAuth
	// cached: the project's template of that name is this very build.
	cached *store.Template
	// room is how large the build may grow within the project's
	// MaxTemplateBytes (0: no bound).
	room int64
	// resume is the project's earlier build whose steps are a prefix of
	// this one's (nil: none); freshAt, when the build skips the cache,
	// is the time in its key (recipe.FreshKey) and record.
	resume  *recipe.Resume
	freshAt time.Time
}

// resolve turns the template a create names into what the
// sandbox records: a built-in's name, or a project's custom template's
// reference.
func (ts Templates) resolve(ctx context.Context, name string) (string, error) {
	c, projectID := ts.c, ts.project
	if name == "" || slices.Contains(c.cfg.Templates, name) {
		return name, nil
	}
	if err := recipe.ValidName(name); err != nil {
		return "", err
	}
	t, err := c.cfg.Store.Templates().Get(ctx, projectID, name)
	if errors.Is(err, store.ErrNotFound) {
		return "", &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("template %q not found in project %s: build it first (lizard template build, POST /v1/templates); built in: %s",
			name, projectID, strings.Join(c.cfg.Templates, ", "))}
	}
	if err != nil {
		return "", err
	}
	return template.Ref(t.Name, t.Key), nil
}

// Plan checks a build request for the project: everything that can
// be refused is refused here, before a build's stream starts.
func (ts Templates) Plan(ctx context.Context, req api.BuildTemplateRequest) (*TemplateBuild, error) {
	c, projectID := ts.c, ts.project
	if err := recipe.ValidName(req.Name); err != nil {
		return nil, err
	}
	if slices.Contains(c.cfg.Templates, req.Name) {
		return nil, errdefs.Invalidf("name %q is a built-in template's; choose another", req.Name)
	}
	r := req.Recipe
	if err := ts.onTemplate(ctx, &r); err != nil {
		return nil, err
	}
	if err := recipe.Validate(&r, c.cfg.Templates); err != nil {
		return nil, err
	}
	if c.cfg.Builder == nil {
		return nil, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "this server builds no custom templates (it was started without a template builder)"}
	}
	auth, err := ts.registryAuth(ctx, r.From, req.Registry)
	if err != nil {
		return nil, err
	}
	var pinned, digest, baseKey string
	if r.From != "" {
		ir, ok := c.cfg.Builder.(ImageResolver)
		if !ok {
			return nil, &errdefs.Error{Kind: errdefs.ErrInvalid, Msg: "this server builds no templates on images (recipe.from): build on a built-in base"}
		}
		if pinned, digest, err = ir.ResolveImage(ctx, r.From, auth); err != nil {
			return nil, err
		}
		baseKey = recipe.ImageBaseKey(digest)
	} else if baseKey, err = c.cfg.Builder.BaseKey(ctx, r.Base); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var e *errdefs.Error
		if errors.As(err, &e) && e.Kind != nil {
			return nil, err // says itself why (a cluster that cannot share builds)
		}
		return nil, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("base template %s is not available: building it failed (the server log says why); try again later", r.Base)}
	}
	b := &TemplateBuild{c: c, projectID: projectID, name: req.Name, recipe: r, key: recipe.Key(projectID, r, baseKey),
		digest: digest, pinned: pinned, auth: auth}
	old, err := c.cfg.Store.Templates().Get(ctx, projectID, req.Name)
	switch {
	case req.SkipCache:
		b.freshAt = c.now().Truncate(time.Millisecond)
		b.key = recipe.FreshKey(b.key, b.freshAt)
	case err == nil && (old.Key == b.key || old.Key == recipe.FreshKey(b.key, old.CreatedAt)):
		b.cached = &old
		return b, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	if !req.SkipCache && r.From == "" {
		if b.resume, err = ts.resumable(ctx, r, baseKey); err != nil {
			return nil, err
		}
	}
	c.tmplMu.Lock()
	defer c.tmplMu.Unlock()
	if c.building[projectID+"/"+req.Name] {
		return nil, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("template %q is being built in project %s; wait for that build to end", req.Name, projectID)}
	}
	if b.room, err = ts.templateRoom(ctx, req.Name); err != nil {
		return nil, err
	}
	if c.cfg.BuildsPerHour > 0 {
		l := c.buildLimits[projectID]
		if l == nil {
			l = rate.NewLimiter(rate.Limit(c.cfg.BuildsPerHour/3600), max(1, int(c.cfg.BuildsPerHour/6)))
			c.buildLimits[projectID] = l
		}
		if r := l.Reserve(); r.Delay() > 0 {
			d := r.Delay()
			r.Cancel()
			return nil, &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: d,
				Msg: fmt.Sprintf("project %s builds templates too often: at most %g an hour; retry in %s (builds found in the cache are not counted)",
					projectID, c.cfg.BuildsPerHour, d.Round(time.Second))}
		}
	}
	c.building[projectID+"/"+req.Name] = true
	return b, nil
}

// onTemplate makes r, when it is built on one of the project's own
// templates — base: NAME, or from: NAME (a bare name, as Docker takes a
// local image before pulling one) — that template's recipe followed by
// r's: the parent's base or image (pinned to its digest), its steps and
// then r's, its start and ready commands unless r gives its own. So the
// build is keyed on all it is made of, and resumes from the parent's
// build (resumable) instead of running its steps again.
func (ts Templates) onTemplate(ctx context.Context, r *api.TemplateRecipe) error {
	c := ts.c
	var name string
	switch {
	case r.Base != "" && r.From == "" && !slices.Contains(c.cfg.Templates, r.Base):
		if err := recipe.ValidName(r.Base); err != nil {
			return errdefs.Invalidf("recipe.base %q: neither a built-in template (%s) nor a template name", r.Base, strings.Join(c.cfg.Templates, ", "))
		}
		name = r.Base
	case r.From != "" && r.Base == "" && recipe.ValidName(r.From) == nil && !strings.ContainsAny(r.From, ".:/@"):
		if _, err := c.cfg.Store.Templates().Get(ctx, ts.project, r.From); err != nil {
			return nil // an image of that name (docker.io/library/NAME)
		}
		name = r.From
	default:
		return nil
	}
	t, err := ts.lookup(ctx, name)
	if err != nil {
		var e *errdefs.Error
		if errors.As(err, &e) && errors.Is(err, errdefs.ErrNotFound) {
			return errdefs.Invalidf("recipe.base %q: %s; build it first, or name a built-in template (%s)", name, e.Msg, strings.Join(c.cfg.Templates, ", "))
		}
		return err
	}
	var parent api.TemplateRecipe
	if err := json.Unmarshal([]byte(t.Recipe), &parent); err != nil {
		return fmt.Errorf("reading template %s's recipe: %w", name, err)
	}
	steps := recipe.Steps(parent)
	for _, st := range steps {
		for _, f := range st.Copy {
			if f.Content == "" && f.Size > 0 {
				return errdefs.Invalidf("recipe.base %q: its record has no contents of its files (it was built before Lizard kept them); build %s again, then build on it", name, name)
			}
		}
	}
	if parent.From != "" && t.Digest != "" {
		ref, err := regname.ParseReference(parent.From)
		if err != nil {
			return fmt.Errorf("template %s's image %q: %w", name, parent.From, err)
		}
		parent.From = ref.Context().Digest(t.Digest).String()
	}
	// r's fixed run commands run as root, as they would on a built-in
	// base; as steps after the parent's they would take its last user.
	run := slices.Clone(r.Run)
	for i := range run {
		if run[i].User == "" {
			run[i].User = "root"
		}
	}
	child := *r
	child.Run = run
	flat := api.TemplateRecipe{Base: parent.Base, From: parent.From, Start: parent.Start, Ready: parent.Ready,
		Steps: append(steps, recipe.Steps(child)...)}
	if r.Start != "" {
		flat.Start, flat.Ready = r.Start, r.Ready
	} else if r.Ready != "" {
		flat.Ready = r.Ready
	}
	*r = flat
	return nil
}

// resumable finds the project's template whose build r's build can
// resume from: built on r's base (its recipe gives back its key, the
// base's build and the files' contents included), its steps the longest
// prefix of r's. Nil: none; r runs every step.
func (ts Templates) resumable(ctx context.Context, r api.TemplateRecipe, baseKey string) (*recipe.Resume, error) {
	rows, err := ts.c.cfg.Store.Templates().List(ctx, ts.project)
	if err != nil {
		return nil, err
	}
	want := stepTexts(recipe.Steps(r))
	var best *recipe.Resume
	for _, t := range rows {
		var r0 api.TemplateRecipe
		if json.Unmarshal([]byte(t.Recipe), &r0) != nil || r0.From != "" || r0.Base != r.Base {
			continue
		}
		if k := recipe.Key(ts.project, r0, baseKey); t.Key != k && t.Key != recipe.FreshKey(k, t.CreatedAt) {
			continue // another base's build, or a record without its files
		}
		got := stepTexts(recipe.Steps(r0))
		if len(got) == 0 || len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			continue
		}
		if best == nil || len(got) > best.Steps {
			best = &recipe.Resume{Key: t.Key, Steps: len(got)}
		}
	}
	return best, nil
}

// stepTexts is steps as JSON, each: steps compared by what they say.
func stepTexts(steps []api.TemplateStep) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		b, _ := json.Marshal(s)
		out[i] = string(b)
	}
	return out
}

// templateRoom checks the project's template quotas for a build of name
// (which replaces the project's template of that name, if any) and
// returns how many bytes the build may grow to (0: no bound). Builds under
// way count as templates, each of unknown size until it is recorded
// (Run checks the sizes again then). Called with tmplMu held.
func (ts Templates) templateRoom(ctx context.Context, name string) (int64, error) {
	c, projectID := ts.c, ts.project
	if c.cfg.MaxTemplates <= 0 && c.cfg.MaxTemplateBytes <= 0 {
		return 0, nil
	}
	count, used, err := ts.templateUse(ctx, name)
	if err != nil {
		return 0, err
	}
	for k := range c.building {
		if p, n, _ := strings.Cut(k, "/"); p == projectID && n != name {
			count++
		}
	}
	if max := c.cfg.MaxTemplates; max > 0 && count >= max {
		return 0, &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Minute,
			Msg: fmt.Sprintf("project %s has %d custom templates (builds under way included), its maximum: delete one first (DELETE /v1/templates/{name}, lizard template delete), rebuild one under its own name, or have the operator raise --max-templates-per-project", projectID, count)}
	}
	if max := c.cfg.MaxTemplateBytes; max > 0 {
		if used >= max {
			return 0, overTemplateDisk(projectID, used, max, "")
		}
		return max - used, nil
	}
	return 0, nil
}

// templateUse counts the project's templates other than name, and adds
// up their builds' sizes.
func (ts Templates) templateUse(ctx context.Context, name string) (count int, bytes int64, err error) {
	rows, err := ts.c.cfg.Store.Templates().List(ctx, ts.project)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range rows {
		if t.Name != name {
			count++
			bytes += t.SizeBytes
		}
	}
	return count, bytes, nil
}

// overTemplateDisk is the refusal of a build past the project's
// MaxTemplateBytes: the project's other templates use used bytes, and
// this build, when grew, says how large it got.
func overTemplateDisk(projectID string, used, max int64, grew string) error {
	msg := fmt.Sprintf("project %s's custom templates use %d MiB, its maximum of %d MiB for templates: ", projectID, used>>20, max>>20)
	if grew != "" {
		msg = fmt.Sprintf("project %s's custom templates use %d MiB and this build %s, past its maximum of %d MiB for templates; nothing of the build is kept: ", projectID, used>>20, grew, max>>20)
	}
	return &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Minute,
		Msg: msg + "delete templates it no longer needs (DELETE /v1/templates/{name}, lizard template delete; GET /v1/templates lists each one's sizeBytes), or have the operator raise --max-template-disk-per-project-mb"}
}

// registryAuth is a build's registry credentials as the pull uses them:
// a password named by the project's secret (passwordSecret) opened — only
// for the registry of from among the secret's hosts, over plain HTTP only
// if the secret allows it, its use audited as an injection's is. The value
// goes where a given password goes: into this build's pull, and nowhere
// else (not the template's record, nor a log).
func (ts Templates) registryAuth(ctx context.Context, from string, a *api.RegistryAuth) (*api.RegistryAuth, error) {
	if a == nil || a.PasswordSecret == "" || from == "" {
		return a, nil
	}
	if a.Password != "" {
		return nil, errdefs.Invalidf("registry: give password or passwordSecret, not both")
	}
	sec := ts.c.cfg.Secrets
	if sec == nil {
		return nil, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "registry.passwordSecret: this server opens no secrets (it has no secrets key); give registry.password instead"}
	}
	ref, err := regname.ParseReference(from)
	if err != nil {
		return nil, errdefs.Invalidf("recipe.from %q: %v", from, err)
	}
	reg := ref.Context().Registry
	host := reg.RegistryStr()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	refs := []secrets.Ref{{Field: "registry.passwordSecret", Name: a.PasswordSecret, Domain: host}}
	if err := sec.Check(ctx, ts.project, refs); err != nil {
		return nil, err
	}
	v, err := sec.Open(ctx, ts.project, a.PasswordSecret, secrets.Use{Host: host, Plain: reg.Scheme() == "http"})
	if err != nil {
		return nil, err
	}
	return &api.RegistryAuth{Username: a.Username, Password: v}, nil
}

// Run builds b, sending progress to emit, records the template and
// returns it. A build's failure is returned as a *recipe.StepError when a
// step failed (the recipe's fault), else as it came.
func (b *TemplateBuild) Run(ctx context.Context, emit func(api.TemplateBuildEvent)) (api.Template, bool, error) {
	c := b.c
	if b.cached != nil {
		return templateAPI(*b.cached), true, nil
	}
	defer func() {
		c.tmplMu.Lock()
		delete(c.building, b.projectID+"/"+b.name)
		c.tmplMu.Unlock()
	}()
	r := b.recipe
	if b.pinned != "" {
		// The builder pulls the image the key was made of, whatever the
		// tag names by now; its credentials go beside the recipe.
		r.From = b.pinned
		ctx = recipe.WithRegistryAuth(ctx, b.auth)
	}
	if b.room > 0 {
		ctx = recipe.WithMaxBytes(ctx, b.room)
	}
	if b.resume != nil {
		ctx = recipe.WithResume(ctx, b.resume)
	}
	// Each step is cached by its inputs as the template's; skipCache
	// reads none of the cache and replaces the entries of its steps.
	ctx = recipe.WithStepCache(ctx, &recipe.StepCache{Template: b.name, Skip: !b.freshAt.IsZero()})
	res, err := c.cfg.Builder.Build(ctx, b.projectID, r, b.key, emit)
	if err != nil {
		return api.Template{}, false, err
	}
	if err := b.fits(ctx, res); err != nil {
		return api.Template{}, false, err
	}
	// The record keeps the files' contents: a later build resumes from
	// this one, or builds on it, only if its recipe gives its key back.
	// Responses leave them out (templateAPI).
	stored, _ := json.Marshal(b.recipe)
	t := store.Template{ProjectID: b.projectID, Name: b.name, Key: b.key, Base: b.recipe.Base, Recipe: string(stored),
		CreatedAt: c.now(), BuildMs: res.BuildMs, SizeBytes: res.SizeBytes, Digest: b.digest}
	if !b.freshAt.IsZero() {
		t.CreatedAt = b.freshAt
	}
	old, oerr := c.cfg.Store.Templates().Get(ctx, b.projectID, b.name)
	if err := c.cfg.Builder.Hold(b.key); err != nil {
		return api.Template{}, false, err
	}
	if err := c.cfg.Store.Templates().Put(context.WithoutCancel(ctx), t); err != nil {
		return api.Template{}, false, err
	}
	if oerr == nil && old.Key != b.key {
		c.builds.collect(context.WithoutCancel(ctx), old.Name, old.Key)
	}
	return templateAPI(t), res.Cached, nil
}

// fits checks the finished build res against the project's
// MaxTemplateBytes again, with the sizes recorded now (builds of the
// project's other templates may have ended meanwhile; the builder stops
// a build that grows past its room, which this catches between its
// measures): a build past it is removed, unless it was in the cache
// already and something else uses it.
func (b *TemplateBuild) fits(ctx context.Context, res recipe.Result) error {
	c := b.c
	if c.cfg.MaxTemplateBytes <= 0 {
		return nil
	}
	_, used, err := Templates{c: c, project: b.projectID}.templateUse(ctx, b.name)
	if err != nil {
		return err
	}
	if used+res.SizeBytes <= c.cfg.MaxTemplateBytes {
		return nil
	}
	if !res.Cached {
		if _, err := c.cfg.Builder.Release(b.key); err != nil {
			c.log.Error("removing a template build past its project's quota", "key", b.key, "err", err)
		}
	} else {
		c.builds.collect(context.WithoutCancel(ctx), b.name, b.key)
	}
	return overTemplateDisk(b.projectID, used, c.cfg.MaxTemplateBytes, fmt.Sprintf("%d MiB", res.SizeBytes>>20))
}

func templateAPI(t store.Template) api.Template {
	var r api.TemplateRecipe
	json.Unmarshal([]byte(t.Recipe), &r)
	return api.Template{Name: t.Name, ProjectID: t.ProjectID, Base: t.Base, Key: t.Key, Digest: t.Digest, CreatedAt: t.CreatedAt,
		BuildMs: t.BuildMs, SizeBytes: t.SizeBytes, Recipe: recipe.Stored(r)}
}

func (ts Templates) lookup(ctx context.Context, name string) (store.Template, error) {
	c, projectID := ts.c, ts.project
	t, err := c.cfg.Store.Templates().Get(ctx, projectID, name)
	if errors.Is(err, store.ErrNotFound) {
		return t, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("template %q not found in project %s", name, projectID)}
	}
	return t, err
}

// Get returns the project's custom template name.
func (ts Templates) Get(ctx context.Context, name string) (api.Template, error) {
	t, err := ts.lookup(ctx, name)
	if err != nil {
		return api.Template{}, err
	}
	return templateAPI(t), nil
}

// List returns the project's custom templates, by name.
func (ts Templates) List(ctx context.Context) ([]api.Template, error) {
	c, projectID := ts.c, ts.project
	rows, err := c.cfg.Store.Templates().List(ctx, projectID)
	if err != nil {
		return nil, err
	}
	out := []api.Template{}
	for _, t := range rows {
		out = append(out, templateAPI(t))
	}
	return out, nil
}

// Delete removes the project's template name. It is refused while
// live (running or paused) sandboxes of the project were made from it;
// its build leaves the cache once nothing refers to it (snapshots keep it
// until they are deleted).
func (ts Templates) Delete(ctx context.Context, name string) error {
	c, projectID := ts.c, ts.project
	t, err := ts.lookup(ctx, name)
	if err != nil {
		return err
	}
	c.tmplMu.Lock()
	busy := c.building[projectID+"/"+name]
	c.tmplMu.Unlock()
	if busy {
		return &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("template %q is being built; wait for the build to end", name)}
	}
	live, err := c.cfg.Store.ListSandboxes(ctx, store.Filter{ProjectID: projectID, LiveOnly: true})
	if err != nil {
		return err
	}
	var using []string
	for _, sb := range live {
		if n, _, ok := template.SplitRef(sb.Template); ok && n == name {
			using = append(using, sb.ID)
		}
	}
	if len(using) > 0 {
		return &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("template %q is used by %d live sandbox(es) (%s); kill them first",
			name, len(using), strings.Join(using[:min(len(using), 5)], ", "))}
	}
	if err := c.cfg.Store.Templates().Delete(ctx, projectID, name); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("template %q not found in project %s", name, projectID)}
		}
		return err
	}
	c.builds.collect(context.WithoutCancel(ctx), t.Name, t.Key)
	if f, ok := c.cfg.Builder.(StepForgetter); ok {
		if err := f.ForgetSteps(projectID, name); err != nil {
			c.log.Error("removing a deleted template's step cache entries", "template", name, "err", err)
		}
	}
	return nil
}

// collect drops what the server keeps for reference name@key (warm pool,
// template snapshot) and removes key's build from the cache unless a
// template record, a live sandbox or a snapshot still refers to it.
func (b builds) collect(ctx context.Context, name, key string) {
	c := b.c
	ref := template.Ref(name, key)
	if c.cfg.Forget != nil {
		fctx, cancel := context.WithTimeout(ctx, time.Minute)
		c.cfg.Forget(fctx, ref)
		cancel()
	}
	used, err := c.builds.keyInUse(ctx, key)
	if err != nil {
		c.log.Error("checking whether a template build is still used; keeping it", "key", key, "err", err)
		return
	}
	if used != "" {
		c.log.Info("keeping a template build still in use", "key", key, "used_by", used)
		return
	}
	removed, err := c.cfg.Builder.Release(key)
	switch {
	case err != nil:
		c.log.Error("removing a template build", "key", key, "err", err)
	case removed:
		c.log.Info("removed a template build nothing uses", "template", name, "key", key)
	default:
		c.log.Info("keeping a template build another server's data directory holds", "template", name, "key", key)
	}
}

// keyInUse names something that refers to build key, or "".
func (b builds) keyInUse(ctx context.Context, key string) (string, error) {
	c := b.c
	used, err := recipe.Uses(ctx, c.cfg.Store)
	return used[key], err
}

// collectOrphan collects the build of ended sandbox id's custom template
// if no template record names it any more (deleted, or rebuilt under its
// name while the sandbox ran).
func (b builds) collectOrphan(ctx context.Context, id string) {
	c := b.c
	sb, err := c.cfg.Store.GetSandbox(ctx, id)
	if err != nil {
		return
	}
	c.builds.collectTemplate(ctx, sb.Template)
}

// collectTemplate collects ref's build once nothing refers to it, when
// ref is a custom template's whose record is gone or now names another
// build.
func (b builds) collectTemplate(ctx context.Context, ref string) {
	c := b.c
	name, key, ok := template.SplitRef(ref)
	if !ok {
		return
	}
	tmpls, err := c.cfg.Store.Templates().List(ctx, "")
	if err != nil {
		return
	}
	for _, t := range tmpls {
		if t.Key == key {
			return
		}
	}
	c.builds.collect(ctx, name, key)
}
