package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// warmEntry is one --warm: a template (in Project, or in any project when
// Project is "") and its pool size.
type warmEntry struct {
	Project, Name string
	Size          int
}

// warmFlag is serve's repeated --warm [PROJECT/]NAME=N.
type warmFlag []warmEntry

func (w *warmFlag) String() string {
	var out []string
	for _, e := range *w {
		s := e.Name + "=" + strconv.Itoa(e.Size)
		if e.Project != "" {
			s = e.Project + "/" + s
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func (w *warmFlag) Set(v string) error {
	target, n, ok := strings.Cut(v, "=")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > 64 {
		return fmt.Errorf("want [PROJECT/]NAME=N with N from 0 to 64, such as my-tpl=2")
	}
	e := warmEntry{Name: target, Size: size}
	if p, name, ok := strings.Cut(target, "/"); ok {
		e.Project, e.Name = p, name
	}
	if !slices.Contains(template.Names(), e.Name) {
		if err := recipe.ValidName(e.Name); err != nil || e.Project == "" && strings.Contains(target, "/") {
			return fmt.Errorf("%q: want a template name (lower-case letters, digits, dashes)", target)
		}
	} else if e.Project != "" {
		return fmt.Errorf("%q: built-in templates belong to no project; write %s=%d", target, e.Name, size)
	}
	*w = append(*w, e)
	return nil
}

// sizes resolves the entries against the store each time it is called:
// templates built, rebuilt or deleted after the start are followed.
func (w warmFlag) sizes(st *store.Store, logger *slog.Logger) func(ctx context.Context) map[string]int {
	var last map[string]int // the last answer, kept when the store fails
	return func(ctx context.Context) map[string]int {
		out := map[string]int{}
		var custom bool
		for _, e := range w {
			if slices.Contains(template.Names(), e.Name) {
				out[e.Name] = e.Size
			} else {
				custom = true
			}
		}
		if !custom {
			return out
		}
		all, err := st.Templates().List(ctx, "")
		if err != nil {
			// Not an empty answer: that would drain the pools.
			logger.Error("listing templates for the warm pool; keeping the last sizes", "err", err)
			if last != nil {
				return last
			}
			return out
		}
		for _, t := range all {
			for _, e := range w {
				if e.Name == t.Name && (e.Project == "" || e.Project == t.ProjectID) {
					out[template.Ref(t.Name, t.Key)] = e.Size
				}
			}
		}
		last = out
		return out
	}
}
