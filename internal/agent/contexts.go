package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/pykernel"
)

// Canonical language names, as contexts report them.
const (
	langPython     = "python"
	langJavaScript = "javascript"
	langBash       = "bash"
	// TypeScript runs only in stateful contexts: the Node process strips
	// its types (module.stripTypeScriptTypes) before running each call.
	langTypeScript = "typescript"
)

// normalizeLanguage maps the names a request may use to the canonical one.
func normalizeLanguage(s string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "python", "python3", "py":
		return langPython, true
	case "javascript", "js", "node", "nodejs":
		return langJavaScript, true
	case "bash", "sh", "shell":
		return langBash, true
	case "typescript", "ts":
		return langTypeScript, true
	case "r":
		return langR, true
	case "java":
		return langJava, true
	}
	return "", false
}

// defaultContextID names the context a language uses when a call names none.
func defaultContextID(lang string) string { return "default-" + lang }

// statefulDefaultID names the stateful context of javascript or typescript
// that a call with no context and stateful set runs in (E2B's default
// kernel keeps its variables); it is made on first use.
func statefulDefaultID(lang string) string { return "default-" + lang + "-stateful" }

// replLanguage reports whether lang runs in a stateful context's Node process.
func replLanguage(lang string) bool { return lang == langJavaScript || lang == langTypeScript }

var errContextClosed = errors.New("context was deleted")

// execContext is one execution context. Calls to it run one at a time: a
// Python context's kernel queues them itself; JavaScript and bash contexts
// queue on turn.
type execContext struct {
	info api.Context
	// stateful JavaScript runs in one Node process (repl) for all calls,
	// as R and Java contexts always do in their kernel's.
	stateful bool
	// root runs the context's code as root rather than the sandbox user
	// (CreateContextRequest.User).
	root bool
	turn chan struct{} // held while a js/bash call runs
	// starting is held while a kernel starts or restarts, so concurrent
	// callers wait for one start instead of racing two.
	starting chan struct{}

	mu     sync.Mutex
	kernel Kernel
	repl   *jsRepl
	closed bool
}

// as is who runs c's code.
func (c *execContext) as() runAs { return runAs{root: c.root} }

func newExecContext(id, lang, cwd string) *execContext {
	return &execContext{
		info:     api.Context{ID: id, Language: lang, Cwd: cwd},
		turn:     make(chan struct{}, 1),
		starting: make(chan struct{}, 1),
	}
}

func acquire(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *execContext) isDefault() bool { return c.info.ID == defaultContextID(c.info.Language) }

func (c *execContext) current() (Kernel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errContextClosed
	}
	return c.kernel, nil
}

// kernel returns c's running kernel, starting it if it is not running (the
// first call, or after a start that failed).
func (a *Agent) kernel(ctx context.Context, c *execContext) (Kernel, error) {
	if k, err := c.current(); k != nil || err != nil {
		return k, err
	}
	if err := acquire(ctx, c.starting); err != nil {
		return nil, err
	}
	defer func() { <-c.starting }()
	if k, err := c.current(); k != nil || err != nil {
		return k, err
	}
	return a.startInto(ctx, c)
}

// startInto starts a kernel for c; the caller holds c.starting.
func (a *Agent) startInto(ctx context.Context, c *execContext) (Kernel, error) {
	k, err := a.startKernel(ctx, c)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed { // deleted while starting
		k.Close()
		return nil, errContextClosed
	}
	c.kernel = k
	return k, nil
}

func (a *Agent) startKernel(ctx context.Context, c *execContext) (Kernel, error) {
	ctx, cancel := context.WithTimeout(ctx, kernelStartTimeout)
	defer cancel()
	start := time.Now()
	cwd := c.info.Cwd
	k, err := a.cfg.StartKernel(ctx, pykernel.Config{
		Python:     a.cfg.Python,
		Cwd:        cwd,
		Env:        a.launch.envFor(c.as()),
		Credential: a.launch.cred(c.as()),
		Logger:     a.log.With("component", "pykernel", "cwd", cwd),
	})
	if err != nil {
		if m := a.pythonMissing(err); m != nil {
			return nil, m
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			// What to do is the code's: a retry as is fails the same way.
			return nil, fmt.Errorf("the sandbox's disk is full (its diskMb limit), so its Python kernel cannot start: free space (delete files), then retry: %w", err)
		}
		return nil, fmt.Errorf("starting python kernel: %w", err)
	}
	a.log.Info("python kernel started", "cwd", cwd, "duration", time.Since(start))
	return k, nil
}

// close ends c's kernel; later calls to c fail. It does not wait for a
// kernel start in progress: that kernel is closed when its start ends.
func (c *execContext) close() error {
	c.mu.Lock()
	c.closed = true
	k := c.kernel
	c.kernel = nil
	r := c.repl
	c.repl = nil
	c.mu.Unlock()
	if r != nil {
		r.stop()
	}
	if k == nil {
		return nil
	}
	if err := k.Close(); err != nil {
		return fmt.Errorf("closing kernel of context %s: %w", c.info.ID, err)
	}
	return nil
}

// lookup finds a context by id, answering 404 itself when there is none.
func (a *Agent) lookup(w http.ResponseWriter, id string) *execContext {
	a.mu.Lock()
	c, ok := a.contexts[id]
	a.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "context %q not found", id)
		return nil
	}
	return c
}

func (a *Agent) createContext(w http.ResponseWriter, r *http.Request) {
	var req api.CreateContextRequest
	if !a.decode(w, r, &req, true) {
		return
	}
	lang, ok := normalizeLanguage(req.Language)
	if !ok {
		invalid(w, "language", "unsupported language %q (want %s)", req.Language, languages)
		return
	}
	if req.Stateful && !replLanguage(lang) && !kernelLanguage(lang) {
		invalid(w, "stateful", "only javascript and typescript contexts can be made stateful (%s contexts keep their state or run per call as they are)", lang)
		return
	}
	if lang == langTypeScript && !req.Stateful {
		invalid(w, "language", "typescript runs only in a stateful context (set stateful)")
		return
	}
	as, ok := a.launch.runAs(w, req.User)
	if !ok {
		return
	}
	root := as.root
	var cwd string
	if root {
		cwd, ok = a.launch.dirOf(w, req.Cwd)
	} else {
		cwd, ok = a.launch.cwdOf(w, req.Cwd)
	}
	if !ok {
		return
	}
	c := newExecContext("ctx_"+randomHex(8), lang, cwd)
	c.stateful = req.Stateful || kernelLanguage(lang)
	c.root = root
	if lang == langPython {
		// Start the kernel now so errors surface here, not on first use.
		k, err := a.startKernel(r.Context(), c)
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			if errors.Is(err, os.ErrPermission) {
				// Permissions canEnter does not model (ACLs, LSMs).
				invalid(w, "cwd", "the sandbox user cannot start Python in %s: %v", cwd, err)
				return
			}
			writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", err)
			return
		}
		c.kernel = k
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		c.close()
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "agent is shutting down")
		return
	}
	a.contexts[c.info.ID] = c
	a.order = append(a.order, c.info.ID)
	a.mu.Unlock()
	a.log.Info("context created", "context", c.info.ID, "language", lang, "cwd", cwd, "root", root)
	api.WriteJSON(w, http.StatusCreated, c.info)
}

// statefulDefault returns the stateful default context id of lang (the
// stateful one of javascript or typescript, the default one of r or java),
// making it on first use, or answers 503 itself when the agent is shutting
// down.
func (a *Agent) statefulDefault(w http.ResponseWriter, lang, id string) *execContext {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.contexts[id]; ok {
		return c
	}
	if a.closed {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "agent is shutting down")
		return nil
	}
	c := newExecContext(id, lang, a.launch.workdir)
	c.stateful = true
	a.contexts[id] = c
	a.order = append(a.order, id)
	return c
}

func (a *Agent) listContexts(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	list := api.ContextList{Contexts: make([]api.Context, 0, len(a.order))}
	for _, id := range a.order {
		list.Contexts = append(list.Contexts, a.contexts[id].info)
	}
	a.mu.Unlock()
	api.WriteJSON(w, http.StatusOK, list)
}

func (a *Agent) restartContext(w http.ResponseWriter, r *http.Request) {
	c := a.lookup(w, r.PathValue("id"))
	if c == nil {
		return
	}
	if c.info.Language == langPython {
		if err := a.restartKernel(r.Context(), c); err != nil {
			if r.Context().Err() != nil {
				return
			}
			writeError(w, http.StatusInternalServerError, api.CodeInternal, "restarting context %s: %v", c.info.ID, err)
			return
		}
	}
	if c.stateful {
		// The next call starts a new Node process, without the variables.
		c.mu.Lock()
		r := c.repl
		c.mu.Unlock()
		if r != nil {
			c.dropRepl(r)
		}
	}
	// Other JavaScript and bash contexts keep no state: nothing to restart.
	a.log.Info("context restarted", "context", c.info.ID)
	api.WriteJSON(w, http.StatusOK, c.info)
}

func (a *Agent) restartKernel(ctx context.Context, c *execContext) error {
	if err := acquire(ctx, c.starting); err != nil {
		return err
	}
	defer func() { <-c.starting }()
	k, err := c.current()
	if err != nil {
		return err
	}
	if k == nil {
		_, err := a.startInto(ctx, c)
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, kernelStartTimeout)
	defer cancel()
	return k.Restart(ctx)
}

func (a *Agent) deleteContext(w http.ResponseWriter, r *http.Request) {
	c := a.lookup(w, r.PathValue("id"))
	if c == nil {
		return
	}
	if c.isDefault() {
		invalid(w, "id", "the default context %s cannot be deleted (restart it instead)", c.info.ID)
		return
	}
	a.mu.Lock()
	delete(a.contexts, c.info.ID)
	for i, id := range a.order {
		if id == c.info.ID {
			a.order = append(a.order[:i], a.order[i+1:]...)
			break
		}
	}
	a.mu.Unlock()
	if err := c.close(); err != nil {
		a.log.Warn("deleting context", "context", c.info.ID, "err", err)
	}
	a.log.Info("context deleted", "context", c.info.ID)
	w.WriteHeader(http.StatusNoContent)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
