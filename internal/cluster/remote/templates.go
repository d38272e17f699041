package remote

// Custom template builds on a node (docs/cluster.md): the API hands a
// checked recipe and its key to a node placement picked, which builds it
// and publishes it to the image store, streaming the build's progress
// back; and tells every node to forget and remove a build nothing refers
// to any more.
//
//	POST /internal/v1/templates/build    {recipe, key} → NDJSON buildLines
//	POST /internal/v1/templates/forget   {ref}: drop its template snapshot and warm sandboxes
//	POST /internal/v1/templates/remove   {key}: from the node's disk and the image store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/template"
	"github.com/lizard-build/lizard/internal/trace"
)

// Templates is what a node does with custom templates; *recipe.Shared is
// one.
type Templates interface {
	Build(ctx context.Context, projectID string, r api.TemplateRecipe, key string, emit func(api.TemplateBuildEvent)) (recipe.Result, error)
	Remove(ctx context.Context, key string) error
}

var _ Templates = (*recipe.Shared)(nil)

// buildRequest is a build handed to a node. The recipe travels as the
// public API has it (api.TemplateRecipe, checked by the API's
// recipe.Validate), file contents included.
type buildRequest struct {
	Project string             `json:"project"`
	Recipe  api.TemplateRecipe `json:"recipe"`
	Key     string             `json:"key"`
	// Registry pulls Recipe.From's image (pinned): the build's
	// credentials, for this build only (recipe.WithRegistryAuth).
	Registry *api.RegistryAuth `json:"registry,omitempty"`
	// MaxBytes bounds the build's size: the room its project's template
	// quota leaves it (recipe.WithMaxBytes; 0: none).
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// Resume is the project's earlier build to start from, if the node
	// has it (recipe.WithResume).
	Resume *recipe.Resume `json:"resume,omitempty"`
	// StepCache is how the build uses the node's step cache
	// (recipe.WithStepCache).
	StepCache *recipe.StepCache `json:"stepCache,omitempty"`
}

// buildLine is one line of a build's stream: a progress event, then the
// result or the failure (a failed step's with Step, the recipe's fault).
type buildLine struct {
	Event  *api.TemplateBuildEvent `json:"event,omitempty"`
	Result *buildResult            `json:"result,omitempty"`
	Error  *wireError              `json:"error,omitempty"`
	Step   *wireStep               `json:"step,omitempty"`
}

type buildResult struct {
	SizeBytes int64 `json:"sizeBytes"`
	BuildMs   int64 `json:"buildMs"`
	Cached    bool  `json:"cached"`
}

// wireStep is recipe.StepError on the wire.
type wireStep struct {
	Step    string `json:"step"`
	Log     string `json:"log,omitempty"`
	Message string `json:"message"`
}

type refRequest struct {
	Ref string `json:"ref"`
}

type keyRequest struct {
	Key string `json:"key"`
}

func (h *handler) buildTemplate(w http.ResponseWriter, r *http.Request) {
	var in buildRequest
	if !h.decode(w, r, &in) {
		return
	}
	if h.cfg.Templates == nil {
		h.fail(w, r, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "this node builds no custom templates"})
		return
	}
	if err := recipe.Validate(&in.Recipe, template.Names()); err != nil || !recipe.ValidKey(in.Key) {
		h.fail(w, r, errdefs.Invalidf("the build's recipe or key is not valid: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	send := func(l buildLine) {
		enc.Encode(l)
		if flusher != nil {
			flusher.Flush()
		}
	}
	ctx := recipe.WithStepCache(recipe.WithResume(recipe.WithMaxBytes(recipe.WithRegistryAuth(r.Context(), in.Registry), in.MaxBytes), in.Resume), in.StepCache)
	res, err := h.cfg.Templates.Build(ctx, in.Project, in.Recipe, in.Key, func(ev api.TemplateBuildEvent) { send(buildLine{Event: &ev}) })
	var se *recipe.StepError
	switch {
	case errors.As(err, &se):
		send(buildLine{Step: &wireStep{Step: se.Step, Log: se.Log, Message: se.Err.Error()}})
	case err != nil:
		if r.Context().Err() != nil {
			h.log.Info("a custom template build ended: the api process went away", "key", in.Key, "err", err)
		} else {
			h.log.Error("building a custom template", "key", in.Key, "err", err)
		}
		_, we := encodeError(err)
		send(buildLine{Error: &we})
	default:
		send(buildLine{Result: &buildResult{SizeBytes: res.SizeBytes, BuildMs: res.BuildMs, Cached: res.Cached}})
	}
}

func (h *handler) forgetTemplate(w http.ResponseWriter, r *http.Request) {
	var in refRequest
	if !h.decode(w, r, &in) {
		return
	}
	if _, key, ok := template.SplitRef(in.Ref); !ok || !recipe.ValidKey(key) {
		h.fail(w, r, errdefs.Invalidf("%q is not a custom template reference", in.Ref))
		return
	}
	if h.cfg.Forget != nil {
		h.cfg.Forget(r.Context(), in.Ref)
	}
	api.WriteJSON(w, http.StatusOK, struct{}{})
}

func (h *handler) removeTemplate(w http.ResponseWriter, r *http.Request) {
	var in keyRequest
	if !h.decode(w, r, &in) {
		return
	}
	if !recipe.ValidKey(in.Key) {
		h.fail(w, r, errdefs.Invalidf("%q is not a template build's key", in.Key))
		return
	}
	var err error
	if h.cfg.Templates != nil {
		err = h.cfg.Templates.Remove(r.Context(), in.Key)
	}
	h.answer(w, r, struct{}{}, err)
}

// BuildTemplate has the node build projectID's r (key Key(projectID, r, its base's key)),
// sending its progress to emit. A failed step is a *recipe.StepError, as
// on the node.
func (c *Client) BuildTemplate(ctx context.Context, projectID string, r api.TemplateRecipe, key string, emit func(api.TemplateBuildEvent)) (recipe.Result, error) {
	b, err := json.Marshal(buildRequest{Project: projectID, Recipe: r, Key: key, Registry: recipe.RegistryAuthOf(ctx), MaxBytes: recipe.MaxBytesOf(ctx), Resume: recipe.ResumeOf(ctx), StepCache: recipe.StepCacheOf(ctx)})
	if err != nil {
		return recipe.Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base.String()+"/internal/v1/templates/build", bytes.NewReader(b))
	if err != nil {
		return recipe.Result{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	trace.Inject(ctx, req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return recipe.Result{}, ctx.Err()
		}
		return recipe.Result{}, c.unreachable(err)
	}
	defer resp.Body.Close()
	if refusedStatus(resp) {
		return recipe.Result{}, c.refused()
	}
	if resp.StatusCode >= 300 {
		var we wireError
		if err := json.NewDecoder(resp.Body).Decode(&we); err != nil {
			return recipe.Result{}, &errdefs.Error{Msg: fmt.Sprintf("node %s answered %s; its log has the details", c.name, resp.Status)}
		}
		return recipe.Result{}, we.err(c.name)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var l buildLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return recipe.Result{}, c.unreachable(fmt.Errorf("reading the build's stream: %w", err))
		}
		switch {
		case l.Event != nil:
			emit(*l.Event)
		case l.Result != nil:
			return recipe.Result{Key: key, SizeBytes: l.Result.SizeBytes, BuildMs: l.Result.BuildMs, Cached: l.Result.Cached}, nil
		case l.Step != nil:
			return recipe.Result{}, &recipe.StepError{Step: l.Step.Step, Log: l.Step.Log, Err: errors.New(l.Step.Message)}
		case l.Error != nil:
			return recipe.Result{}, l.Error.err(c.name)
		}
	}
	if ctx.Err() != nil {
		return recipe.Result{}, ctx.Err()
	}
	return recipe.Result{}, c.unreachable(fmt.Errorf("the build's stream ended without a result: %v", sc.Err()))
}

// ForgetTemplate has the node drop what it keeps for reference ref
// (template snapshot, warm sandboxes).
func (c *Client) ForgetTemplate(ctx context.Context, ref string) error {
	return c.do(ctx, http.MethodPost, "/templates/forget", refRequest{Ref: ref}, nil)
}

// RemoveTemplate has the node remove build key from its disk and from the
// image store.
func (c *Client) RemoveTemplate(ctx context.Context, key string) error {
	return c.do(ctx, http.MethodPost, "/templates/remove", keyRequest{Key: key}, nil)
}
