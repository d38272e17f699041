package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/oci"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// Templates are a cluster's custom template builds (the control plane's
// TemplateBuilder): each is handed to a node placement picks, which
// builds it and publishes it to the image store, where every other node
// fetches it on its first create from it. The store's template rows are
// what hold a build; one nothing refers to any more is removed from every
// live node and from the image store.
type Templates struct {
	Router *Router
	// Images resolves the images templates are built on (a recipe's
	// from) to their digests, from the api process; the building node
	// pulls them. Nil: templates from images are refused.
	Images *oci.Puller
}

// ResolveImage pins a recipe's image to its linux/amd64 digest, for its
// key; a cluster that cannot share builds is refused first, as BaseKey
// refuses it.
func (t Templates) ResolveImage(ctx context.Context, ref string, auth *api.RegistryAuth) (pinned, digest string, err error) {
	if err := t.usable(ctx); err != nil {
		return "", "", err
	}
	if t.Images == nil {
		return "", "", errdefs.Invalidf("this cluster builds no templates from images")
	}
	var a *oci.Auth
	if auth != nil {
		a = &oci.Auth{Username: auth.Username, Password: auth.Password}
	}
	return t.Images.Resolve(ctx, ref, a)
}

// BaseKey is built-in template base's key, known without building it. It is the first thing a
// build's plan asks, so a cluster that cannot share builds is refused
// here, before the build's stream starts (usable).
func (t Templates) BaseKey(ctx context.Context, base string) (string, error) {
	if err := t.usable(ctx); err != nil {
		return "", err
	}
	return template.Key(base)
}

// usable refuses builds in a cluster of several live nodes of which one
// keeps images on its own disk: the others could never use a build made
// there.
func (t Templates) usable(ctx context.Context) error {
	nodes, err := t.Router.list(ctx, true)
	if err != nil {
		return err
	}
	now := t.Router.cfg.Now()
	var live, diskOnly []string
	for _, n := range nodes {
		if !n.Live(now) {
			continue
		}
		live = append(live, n.Name)
		if n.ImageStore == "" {
			diskOnly = append(diskOnly, n.Name)
		}
	}
	if len(live) > 1 && len(diskOnly) > 0 {
		return &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: fmt.Sprintf("custom templates in a cluster of several nodes need an image store every node reads, and node(s) %s keep images on their own disk: start every `lizard node` with --image-store (s3://BUCKET/PREFIX or file:///DIR, docs/storage.md)",
			strings.Join(diskOnly, ", "))}
	}
	return nil
}

// Build has a node build r, preferring one that holds key's build
// already, and relays its progress.
func (t Templates) Build(ctx context.Context, projectID string, r api.TemplateRecipe, key string, emit func(api.TemplateBuildEvent)) (recipe.Result, error) {
	rt := t.Router
	n, err := rt.place(ctx, nil, recipe.ImageName(key))
	if err != nil {
		return recipe.Result{}, err
	}
	defer rt.done(n.Name)
	emit(api.TemplateBuildEvent{Type: api.BuildEventLog, Text: "building on node " + n.Name})
	res, err := rt.clientOf(n).BuildTemplate(ctx, projectID, r, key, emit)
	if err != nil {
		return recipe.Result{}, err
	}
	rt.log.Info("custom template built", "node", n.Name, "key", key, "cached", res.Cached, "build_ms", res.BuildMs)
	return res, nil
}

// Hold records nothing: the store's template rows hold a build.
func (t Templates) Hold(string) error { return nil }

// Release removes build key, which nothing refers to any more, from every
// live node's disk and from the image store. A node without a live lease
// keeps its copy (docs/cluster.md).
func (t Templates) Release(key string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return true, t.each(ctx, func(ctx context.Context, n store.NodeInfo) error {
		return t.Router.clientOf(n).RemoveTemplate(ctx, key)
	})
}

// Forget has every live node drop what it keeps for reference ref: its
// template snapshot and warm sandboxes.
func (t Templates) Forget(ctx context.Context, ref string) {
	if err := t.each(ctx, func(ctx context.Context, n store.NodeInfo) error {
		return t.Router.clientOf(n).ForgetTemplate(ctx, ref)
	}); err != nil {
		t.Router.log.Warn("telling nodes to forget a custom template", "ref", ref, "err", err)
	}
}

// each calls fn for every live node, and joins their failures.
func (t Templates) each(ctx context.Context, fn func(context.Context, store.NodeInfo) error) error {
	nodes, err := t.Router.list(ctx, true)
	if err != nil {
		return err
	}
	now := t.Router.cfg.Now()
	var errs []error
	for _, n := range nodes {
		if n.Live(now) && n.LostAt == nil {
			if err := fn(ctx, n); err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}
