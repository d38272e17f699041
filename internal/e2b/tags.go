package e2b

// Tags of templates, as E2B's SDKs name builds ("name:tag",
// Template.assign_tags, get_tags, remove_tags). Lizard keeps one build per
// template name, so a tag records the build it was given to (its Lizard
// key) and names a template only while that is the template's build;
// a rebuild with the same steps and files is the same build. They are
// kept in a file of the data directory, so they outlive a restart.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Bounds on tags: of one request, of one template and of one project's
// templates (past them the oldest go: a template deleted through Lizard's
// own API keeps its tags until then).
const (
	maxTags            = 16
	maxTagsPerTemplate = 64
	maxTaggedTemplates = 1000
)

type tagRecord struct {
	BuildID   string    `json:"buildID"`
	Key       string    `json:"key"`
	CreatedAt time.Time `json:"createdAt"`
}

// tagStore holds tags by project, template and tag.
type tagStore struct {
	path string // "": held in memory only

	mu sync.Mutex
	m  map[string]map[string]map[string]tagRecord
}

func openTags(path string) (*tagStore, error) {
	ts := &tagStore{path: path, m: map[string]map[string]map[string]tagRecord{}}
	if path == "" {
		return ts, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ts, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading template tags: %w", err)
	}
	if err := json.Unmarshal(b, &ts.m); err != nil {
		return nil, fmt.Errorf("reading template tags %s: %w", path, err)
	}
	return ts, nil
}

// save writes the tags (under mu) to a new file renamed into place.
func (ts *tagStore) save() error {
	if ts.path == "" {
		return nil
	}
	b, _ := json.Marshal(ts.m)
	tmp := ts.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, ts.path)
}

func (ts *tagStore) template(project, name string) map[string]tagRecord {
	p := ts.m[project]
	if p == nil {
		p = map[string]map[string]tagRecord{}
		ts.m[project] = p
	}
	t := p[name]
	if t == nil {
		t = map[string]tagRecord{}
		p[name] = t
	}
	return t
}

// set gives tags to build buildID (Lizard key key) of project's name.
func (ts *tagStore) set(project, name string, tags []string, buildID, key string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.template(project, name)
	now := time.Now().UTC()
	for _, tag := range tags {
		t[tag] = tagRecord{BuildID: buildID, Key: key, CreatedAt: now}
	}
	for len(t) > maxTagsPerTemplate {
		oldest := ""
		for tag, r := range t {
			if oldest == "" || r.CreatedAt.Before(t[oldest].CreatedAt) {
				oldest = tag
			}
		}
		delete(t, oldest)
	}
	for p := ts.m[project]; len(p) > maxTaggedTemplates; {
		oldest, at := "", time.Time{}
		for n, tags := range p {
			var newest time.Time
			for _, r := range tags {
				if r.CreatedAt.After(newest) {
					newest = r.CreatedAt
				}
			}
			if oldest == "" || newest.Before(at) {
				oldest, at = n, newest
			}
		}
		delete(p, oldest)
	}
	return ts.save()
}

func (ts *tagStore) key(project, name, tag string) (string, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	r, ok := ts.m[project][name][tag]
	return r.Key, ok
}

func (ts *tagStore) get(project, name, tag string) (tagRecord, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	r, ok := ts.m[project][name][tag]
	return r, ok
}

// drop forgets a deleted template's tags.
func (ts *tagStore) drop(project, name string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.m[project], name)
	ts.save()
}

// remove takes tags off name; ones it does not have are not an error.
func (ts *tagStore) remove(project, name string, tags []string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.m[project][name]
	for _, tag := range tags {
		delete(t, tag)
	}
	return ts.save()
}

type tagJSON struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

func (ts *tagStore) list(project, name string) []tagJSON {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := []tagJSON{}
	for tag, r := range ts.m[project][name] {
		out = append(out, tagJSON{Tag: tag, BuildID: r.BuildID, CreatedAt: r.CreatedAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}

// currentTag is the record that stands for name's build when no tag was
// given to it through this surface (a template built through Lizard's own
// API): the default tag, with a build ID made from its key.
func currentTag(key string, created time.Time) tagRecord {
	return tagRecord{BuildID: uuidOf(key), Key: key, CreatedAt: created}
}

// uuidOf is a UUID-shaped ID made from key, which E2B's SDKs parse as one.
func uuidOf(key string) string {
	x := fmt.Sprintf("%032s", key)
	if len(x) > 32 {
		x = x[:32]
	}
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// assignTags is Template.assign_tags("name:tag", tags): the tags name the
// build the target names.
func (h *Handler) assignTags(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if len(req.Tags) == 0 || len(req.Tags) > maxTags {
		h.fail(w, r, errdefs.Invalidf("tags: want 1 to %d", maxTags))
		return
	}
	for _, t := range req.Tags {
		if err := tagRe(t); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	project, _ := auth.ProjectID(r.Context())
	if _, err := h.resolveTemplate(r.Context(), project, req.Target); err != nil {
		h.fail(w, r, err)
		return
	}
	name, tag := splitName(req.Target)
	if tag == "" {
		tag = defaultTag
	}
	t, err := h.cfg.Control.Project(project).Templates().Get(r.Context(), name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rec, ok := h.tags.get(project, name, tag)
	if !ok {
		rec = currentTag(t.Key, t.CreatedAt)
	}
	if err := h.tags.set(project, name, req.Tags, rec.BuildID, rec.Key); err != nil {
		h.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusCreated, map[string]any{"tags": req.Tags, "buildID": rec.BuildID})
}

func (h *Handler) removeTags(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	project, _ := auth.ProjectID(r.Context())
	name, _ := splitName(req.Name)
	if _, err := h.cfg.Control.Project(project).Templates().Get(r.Context(), name); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.tags.remove(project, name, req.Tags); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) listTags(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	name, _ := splitName(r.PathValue("id"))
	t, err := h.cfg.Control.Project(project).Templates().Get(r.Context(), name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := h.tags.list(project, name)
	if !slices.ContainsFunc(out, func(t tagJSON) bool { return t.Tag == defaultTag }) {
		if _, ok := h.tags.get(project, name, defaultTag); !ok {
			c := currentTag(t.Key, t.CreatedAt)
			out = append(out, tagJSON{Tag: defaultTag, BuildID: c.BuildID, CreatedAt: c.CreatedAt})
		}
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// tagsFile is where a data directory keeps the tags.
func tagsFile(dir string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "tags.json")
}
