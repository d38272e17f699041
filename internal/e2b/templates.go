package e2b

// E2B's Template SDK (Template().from_...().copy(...).run_cmd(...),
// Template.build) over Lizard's custom templates (docs/templates.md,
// docs/e2b.md). The SDK builds in four calls, which this file serves in
// order:
//
//  1. POST /v3/templates names the template (name[:tag]) and gets a
//     build ID: a build is requested, nothing runs yet.
//  2. GET /templates/{id}/files/{hash}, for each copy step: whether the
//     project has uploaded those files (the SDK's hash of them), and if
//     not a URL to PUT their tar to — signed here, so that the SDK's plain
//     HTTP client needs no key (uploads.Store keeps them).
//  3. POST /v2/templates/{id}/builds/{buildID} with the steps: translated
//     into a recipe (steps.go) and planned as Lizard's POST /v1/templates
//     plans a build (every refusal answered here), then built in the
//     background.
//  4. GET /templates/{id}/builds/{buildID}/status, polled, with the
//     build's log from an offset.
//
// A template's ID is its Lizard name; a build ID is this surface's own,
// kept (with its log) while the server runs.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/e2b/uploads"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/recipe"
)

// Bounds on the builds this surface keeps.
const (
	// maxProjectBuilds and maxNodeBuilds bound the builds kept (requested,
	// running, or ended and kept for their status); past them the oldest
	// ended one is dropped, and with none ended a request is refused.
	maxProjectBuilds = 32
	maxNodeBuilds    = 1024
	// buildKept is how long an ended build's status, or a requested one
	// never started, is kept.
	buildKept = time.Hour
	// maxBuildLogs bounds one build's log entries; maxLogMessage one's
	// message.
	maxBuildLogs  = 10_000
	maxLogMessage = 4096
	// statusPage is the most log entries one status call returns, as E2B's.
	statusPage = 100
	// uploadURLFor is how long an upload URL works: E2B's SDKs give an
	// upload an hour.
	uploadURLFor = time.Hour
)

// E2B's build statuses (TemplateBuildStatus).
const (
	statusWaiting  = "waiting"
	statusBuilding = "building"
	statusReady    = "ready"
	statusError    = "error"
)

// logEntry is E2B's BuildLogEntry.
type logEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Message   string    `json:"message"`
	Level     string    `json:"level"`
	Step      string    `json:"step,omitempty"`
}

// buildReason is E2B's BuildStatusReason.
type buildReason struct {
	Message    string     `json:"message"`
	Step       string     `json:"step,omitempty"`
	LogEntries []logEntry `json:"logEntries"`
}

// templateBuild is one build requested through this surface.
type templateBuild struct {
	id, project, name string
	tags              []string
	requested         time.Time

	mu     sync.Mutex
	status string
	logs   []logEntry
	reason *buildReason
	ended  time.Time
	key    string // the Lizard build's, once ready
}

func (b *templateBuild) log(level, msg string) {
	if len(msg) > maxLogMessage {
		msg = msg[:maxLogMessage] + " …"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case len(b.logs) < maxBuildLogs-1:
		b.logs = append(b.logs, logEntry{Timestamp: time.Now().UTC(), Message: msg, Level: level})
	case len(b.logs) == maxBuildLogs-1:
		b.logs = append(b.logs, logEntry{Timestamp: time.Now().UTC(), Level: "warn",
			Message: fmt.Sprintf("the build's log is cut at %d entries; Lizard's own POST /v1/templates streams all of it", maxBuildLogs)})
	}
}

// templateBuilds are the builds kept, by ID.
type templateBuilds struct {
	mu   sync.Mutex
	byID map[string]*templateBuild
}

// add keeps b, dropping what expired and, past the bounds, the oldest
// ended build.
func (bs *templateBuilds) add(b *templateBuild) error {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	now := time.Now()
	inProject := 0
	var oldest *templateBuild
	for id, o := range bs.byID {
		o.mu.Lock()
		status, ended := o.status, o.ended
		o.mu.Unlock()
		if (status == statusWaiting && now.Sub(o.requested) > buildKept) || (!ended.IsZero() && now.Sub(ended) > buildKept) {
			delete(bs.byID, id)
			continue
		}
		if o.project == b.project {
			inProject++
		}
		if !ended.IsZero() && (o.project == b.project || len(bs.byID) >= maxNodeBuilds) && (oldest == nil || ended.Before(oldest.ended)) {
			oldest = o
		}
	}
	if inProject >= maxProjectBuilds || len(bs.byID) >= maxNodeBuilds {
		if oldest == nil {
			return &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Minute,
				Msg: fmt.Sprintf("project %s has %d template builds requested or running through E2B's API, its most (%d on this server in all): wait for them to end", b.project, inProject, maxNodeBuilds)}
		}
		delete(bs.byID, oldest.id)
	}
	bs.byID[b.id] = b
	return nil
}

func (bs *templateBuilds) get(project, templateID, id string) (*templateBuild, error) {
	bs.mu.Lock()
	b := bs.byID[id]
	bs.mu.Unlock()
	if b == nil || b.project != project || b.name != templateID {
		return nil, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("build %s of template %s not found (a build's status is kept %s after it ends, and while the server runs)", id, templateID, buildKept)}
	}
	return b, nil
}

func (h *Handler) templateRoutes(mux *http.ServeMux) {
	mux.Handle("POST /e2b/v3/templates", h.authed(h.requestBuild))
	mux.Handle("GET /e2b/templates/{id}/files/{hash}", h.authed(h.filesLink))
	mux.HandleFunc("PUT /e2b/uploads/{project}/{hash}", h.upload) // signed
	mux.Handle("POST /e2b/v2/templates/{id}/builds/{build}", h.authed(h.startBuild))
	mux.Handle("GET /e2b/templates/{id}/builds/{build}/status", h.authed(h.buildStatus))
	// GET /templates/aliases/{alias} and /templates/{id}/tags overlap
	// (/templates/aliases/tags), which the mux refuses: one route.
	mux.Handle("GET /e2b/templates/{id}/{what}", h.authed(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.PathValue("id") == "aliases":
			h.aliasExists(w, r, r.PathValue("what"))
		case r.PathValue("what") == "tags":
			h.listTags(w, r)
		default:
			h.fail(w, r, notImplemented("GET %s of E2B's template API is not served by Lizard (docs/e2b.md)", strings.TrimPrefix(r.URL.Path, "/e2b")))
		}
	}))
	mux.Handle("POST /e2b/templates/tags", h.authed(h.assignTags))
	mux.Handle("DELETE /e2b/templates/tags", h.authed(h.removeTags))
	for _, p := range []string{"/e2b/templates", "/e2b/templates/", "/e2b/v2/templates", "/e2b/v2/templates/"} {
		mux.Handle(p, h.authed(func(w http.ResponseWriter, r *http.Request) {
			h.fail(w, r, notImplemented("%s %s of E2B's template API is not served by Lizard: Template.build, build_in_background, get_build_status, exists and tags are (docs/e2b.md); list and inspect templates with Lizard's GET /v1/templates",
				r.Method, strings.TrimPrefix(r.URL.Path, "/e2b")))
		}))
	}
}

// builtIn says whether an E2B template name is Lizard's built-in
// template: E2B's base and code interpreter, which templateName maps onto
// it, or its own name.
func builtIn(name string) bool { return templateName(name) == "interpreter" }

// splitName splits E2B's "name:tag".
func splitName(s string) (name, tag string) {
	name, tag, _ = strings.Cut(s, ":")
	return name, tag
}

// defaultTag is the tag E2B gives a build named without one.
const defaultTag = "default"

var tagRe = func(t string) error {
	if t == "" || len(t) > 128 || strings.ContainsAny(t, ":/ \t\n") {
		return errdefs.Invalidf("tag %q: want 1 to 128 characters, without ':', '/' or spaces", t)
	}
	return nil
}

func (h *Handler) requestBuild(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name  string   `json:"name"`
		Alias string   `json:"alias"`
		Tags  []string `json:"tags"`
	}
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if req.Name == "" {
		req.Name = req.Alias
	}
	name, tag := splitName(req.Name)
	if err := recipe.ValidName(name); err != nil {
		h.fail(w, r, err)
		return
	}
	if builtIn(name) {
		h.fail(w, r, errdefs.Invalidf("name %q is a built-in template's (E2B's base and code-interpreter-v1 are Lizard's interpreter); choose another", name))
		return
	}
	tags := req.Tags
	if tag != "" {
		tags = append([]string{tag}, tags...)
	}
	if len(tags) == 0 {
		tags = []string{defaultTag}
	}
	if len(tags) > maxTags {
		h.fail(w, r, errdefs.Invalidf("%d tags: at most %d", len(tags), maxTags))
		return
	}
	for _, t := range tags {
		if err := tagRe(t); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	project, _ := auth.ProjectID(r.Context())
	b := &templateBuild{id: newUUID(), project: project, name: name, tags: slices.Compact(tags), requested: time.Now(), status: statusWaiting}
	if err := h.builds.add(b); err != nil {
		h.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusAccepted, map[string]any{
		"templateID": name, "buildID": b.id, "public": false,
		"names": []string{name}, "aliases": []string{name}, "tags": b.tags,
	})
}

// newUUID is a random UUID (version 4): E2B's SDKs parse build IDs so.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// filesLink answers whether the project has the files of a copy step, and
// where to upload them if not.
func (h *Handler) filesLink(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	hash := r.PathValue("hash")
	if err := uploads.ValidHash(hash); err != nil {
		h.fail(w, r, err)
		return
	}
	if h.uploads == nil {
		h.fail(w, r, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "this server takes no file uploads for templates (it has no upload store): build templates with files through Lizard's POST /v1/templates"})
		return
	}
	if h.uploads.Has(project, hash) {
		api.WriteJSON(w, http.StatusCreated, map[string]any{"present": true})
		return
	}
	expires := strconv.FormatInt(time.Now().Add(uploadURLFor).Unix(), 10)
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	url := fmt.Sprintf("%s://%s/e2b/uploads/%s/%s?expires=%s&signature=%s", scheme, r.Host, project, hash, expires, h.uploadSignature(project, hash, expires))
	api.WriteJSON(w, http.StatusCreated, map[string]any{"present": false, "url": url})
}

func (h *Handler) uploadSignature(project, hash, expires string) string {
	m := hmac.New(sha256.New, h.uploadKey)
	fmt.Fprintf(m, "e2b template upload\n%s\n%s\n%s", project, hash, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// upload takes a copy step's tar at a URL filesLink signed: the URL is
// the credential, as E2B's presigned upload URLs are.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	project, hash := r.PathValue("project"), r.PathValue("hash")
	q := r.URL.Query()
	expires, sig := q.Get("expires"), q.Get("signature")
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil || !hmac.Equal([]byte(sig), []byte(h.uploadSignature(project, hash, expires))) {
		writeError(w, http.StatusUnauthorized, "this upload URL's signature is wrong: ask for one with GET /templates/{id}/files/{hash}, as E2B's SDKs do")
		return
	}
	if time.Now().Unix() > exp {
		writeError(w, http.StatusUnauthorized, "this upload URL has expired: ask for another with GET /templates/{id}/files/{hash}")
		return
	}
	if h.uploads == nil {
		writeError(w, http.StatusServiceUnavailable, "this server takes no file uploads for templates")
		return
	}
	if err := h.uploads.Put(project, hash, r.Body); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *Handler) startBuild(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	b, err := h.builds.get(project, r.PathValue("id"), r.PathValue("build"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var start templateStart
	if err := decode(r, &start); err != nil {
		h.fail(w, r, err)
		return
	}
	b.mu.Lock()
	status := b.status
	if status == statusWaiting {
		b.status = statusBuilding
	}
	b.mu.Unlock()
	if status != statusWaiting {
		h.fail(w, r, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("build %s has started already (%s): request another with POST /v3/templates", b.id, status)})
		return
	}
	plan, err := h.planBuild(r.Context(), b, start)
	if err != nil {
		b.mu.Lock()
		b.status, b.ended = statusError, time.Now()
		b.reason = &buildReason{Message: errdefs.Message(err), LogEntries: []logEntry{}}
		b.mu.Unlock()
		h.fail(w, r, err)
		return
	}
	h.cfg.Audit(r, "template.build", "template", b.name, "build_id", b.id, "surface", "e2b")
	go h.runBuild(b, plan)
	w.WriteHeader(http.StatusAccepted)
}

// planBuild turns start into a recipe and plans its build as Lizard's
// own API does, so that whatever is refused is refused before the build.
func (h *Handler) planBuild(ctx context.Context, b *templateBuild, start templateStart) (plannedBuild, error) {
	rcp, auth, err := h.recipeOf(b.project, start)
	if err != nil {
		return nil, err
	}
	skip := start.Force
	for _, st := range start.Steps {
		skip = skip || st.Force
	}
	return h.cfg.Control.Project(b.project).Templates().Plan(ctx, api.BuildTemplateRequest{Name: b.name, Recipe: rcp, Registry: auth, SkipCache: skip})
}

// plannedBuild is a build Plan accepted (*control.TemplateBuild).
type plannedBuild interface {
	Run(ctx context.Context, emit func(api.TemplateBuildEvent)) (api.Template, bool, error)
}

// runBuild builds b in the background, its events as its log: bounded
// by the build's own limits (30 minutes), not by any request.
func (h *Handler) runBuild(b *templateBuild, plan plannedBuild) {
	b.log("info", "building template "+b.name+" with Lizard")
	var last []string // the failing step's output, for the reason
	t, cached, err := plan.Run(context.Background(), func(ev api.TemplateBuildEvent) {
		switch ev.Type {
		case api.BuildEventStep:
			b.log("info", fmt.Sprintf("[%d/%d] %s", ev.Step, ev.Total, ev.Name))
			last = last[:0]
		case api.BuildEventLog:
			b.log("info", ev.Text)
			if len(last) == 40 {
				last = last[1:]
			}
			last = append(last, ev.Text)
		}
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = time.Now()
	if err != nil {
		msg := errdefs.Message(err)
		var se *recipe.StepError
		if errors.As(err, &se) {
			msg = fmt.Sprintf("the build failed at step %q: %v", se.Step, se.Err)
			if se.Log != "" {
				last = strings.Split(strings.TrimRight(se.Log, "\n"), "\n")
			}
		} else {
			h.log.Error("building a template through E2B's API", "project_id", b.project, "template", b.name, "err", err)
		}
		reason := &buildReason{Message: msg, LogEntries: []logEntry{}}
		for _, l := range last {
			reason.LogEntries = append(reason.LogEntries, logEntry{Timestamp: time.Now().UTC(), Message: l, Level: "error"})
		}
		b.status, b.reason = statusError, reason
		b.logs = append(b.logs, logEntry{Timestamp: time.Now().UTC(), Message: msg, Level: "error"})
		return
	}
	b.status, b.key = statusReady, t.Key
	note := fmt.Sprintf("template %s built (%d bytes, %d ms)", t.Name, t.SizeBytes, t.BuildMs)
	if cached {
		note = "template " + t.Name + " found built with the same steps (Lizard's builds are cached by their steps and files)"
	}
	b.logs = append(b.logs, logEntry{Timestamp: time.Now().UTC(), Message: note, Level: "info"})
	if err := h.tags.set(b.project, b.name, b.tags, b.id, t.Key); err != nil {
		h.log.Error("recording a template's tags", "project_id", b.project, "template", b.name, "err", err)
	}
}

func (h *Handler) buildStatus(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	b, err := h.builds.get(project, r.PathValue("id"), r.PathValue("build"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	offset, limit := 0, statusPage
	if s := r.URL.Query().Get("logsOffset"); s != "" {
		if offset, err = strconv.Atoi(s); err != nil || offset < 0 {
			h.fail(w, r, badRequest("logsOffset %q: want a number from 0", s))
			return
		}
	}
	if s := r.URL.Query().Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 0 || limit > statusPage {
			h.fail(w, r, badRequest("limit %q: want 0 to %d", s, statusPage))
			return
		}
	}
	b.mu.Lock()
	entries := []logEntry{}
	if offset < len(b.logs) {
		entries = slices.Clone(b.logs[offset:min(len(b.logs), offset+limit)])
	}
	out := map[string]any{"templateID": b.name, "buildID": b.id, "status": b.status}
	if b.reason != nil {
		out["reason"] = b.reason
	}
	b.mu.Unlock()
	logs := make([]string, len(entries))
	for i, e := range entries {
		logs[i] = e.Message
	}
	out["logEntries"], out["logs"] = entries, logs
	api.WriteJSON(w, http.StatusOK, out)
}

// aliasExists is Template.exists(name): a built-in template or one of the
// project's (a tag too, when named).
func (h *Handler) aliasExists(w http.ResponseWriter, r *http.Request, alias string) {
	project, _ := auth.ProjectID(r.Context())
	name, tag := splitName(alias)
	if builtIn(name) && tag == "" {
		api.WriteJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": true})
		return
	}
	if _, err := h.resolveTemplate(r.Context(), project, alias); err != nil {
		h.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": false})
}

// resolveTemplate is the Lizard template that E2B's name[:tag] names in
// project: the name, when its tag (if any) names the build the name has
// now. Lizard keeps one build per name, so a tag of a build since
// replaced names nothing.
func (h *Handler) resolveTemplate(ctx context.Context, project, id string) (string, error) {
	name, tag := splitName(id)
	t, err := h.cfg.Control.Project(project).Templates().Get(ctx, name)
	if err != nil {
		return "", err
	}
	if tag == "" {
		return name, nil
	}
	key, ok := h.tags.key(project, name, tag)
	switch {
	case tag == defaultTag:
		return name, nil // the latest build, as on E2B
	case !ok:
		return "", &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("template %s has no tag %q", name, tag)}
	case key != t.Key:
		return "", &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("tag %q of template %s names a build since replaced: Lizard keeps a template's latest build only; build it again", tag, name)}
	}
	return name, nil
}

func (h *Handler) deleteCustomTemplate(w http.ResponseWriter, r *http.Request, id string) {
	project, _ := auth.ProjectID(r.Context())
	name, _ := splitName(id)
	if err := h.cfg.Control.Project(project).Templates().Delete(r.Context(), name); err != nil {
		h.fail(w, r, err)
		return
	}
	h.tags.drop(project, name)
	h.cfg.Audit(r, "template.delete", "template", name, "surface", "e2b")
	w.WriteHeader(http.StatusNoContent)
}

// openTemplates opens what template builds keep in Config.Dir; a store
// that cannot be opened leaves copies refused (or tags in memory), said
// in the log.
func (h *Handler) openTemplates() {
	h.builds.byID = map[string]*templateBuild{}
	h.uploadKey = make([]byte, 32)
	rand.Read(h.uploadKey)
	var err error
	if h.tags, err = openTags(tagsFile(h.cfg.Dir)); err != nil {
		h.log.Error("template tags cannot be read; E2B's tags start empty", "err", err)
		h.tags, _ = openTags("")
	}
	if h.cfg.Dir == "" {
		return
	}
	limits := h.cfg.Uploads
	if limits == (uploads.Limits{}) {
		limits = uploads.DefaultLimits
	}
	if h.uploads, err = uploads.Open(filepath.Join(h.cfg.Dir, "uploads"), limits); err != nil {
		h.log.Error("the upload store of E2B's template copies cannot be opened; copies are refused", "err", err)
	}
}
