package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// codeError is an exception raised by code we sent on our own behalf.
type codeError struct{ content errorContent }

func (e *codeError) Error() string { return e.content.Ename + ": " + e.content.Evalue }

// silent runs code of our own (envs, reseeding): no output, no history, no
// execution count. It returns once the kernel has replied.
func (p *proc) silent(ctx context.Context, code string) error {
	content := executeRequest{Code: code, Silent: true, UserExpressions: map[string]any{}}
	for attempt := 0; ; attempt++ {
		id, err := p.send(p.shell, "execute_request", content)
		if err != nil {
			return err
		}
		r, err := p.awaitReply(ctx, id)
		if err != nil {
			return err
		}
		switch r.Status {
		case "ok":
			return nil
		case "aborted":
			if attempt >= maxAbortRetries {
				return errors.New("kernel kept aborting the request")
			}
			time.Sleep(10 * time.Millisecond)
		default:
			return &codeError{r.errorContent}
		}
	}
}

// awaitReply waits for the execute_reply to msgID, dropping iopub traffic
// (a silent request's and stale output alike).
func (p *proc) awaitReply(ctx context.Context, msgID string) (*executeReply, error) {
	for {
		select {
		case m := <-p.shellCh:
			if m.ParentID != msgID || m.Header.MsgType != "execute_reply" {
				continue
			}
			var r executeReply
			if err := json.Unmarshal(m.Content, &r); err != nil {
				return nil, fmt.Errorf("decoding execute_reply: %w", err)
			}
			return &r, nil
		case <-p.iopubCh:
		case <-p.controlCh:
		case <-p.exited:
			return nil, fmt.Errorf("kernel died (%s)", p.exitReason())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// drain drops messages left over from earlier calls, so they do not sit in
// the buffers while a new call runs.
func (p *proc) drain() {
	for {
		select {
		case <-p.iopubCh:
		case <-p.shellCh:
		case <-p.controlCh:
		default:
			return
		}
	}
}

// drainExited hands handle what the kernel published before it exited:
// until its iopub connection ends, bounded in case it never reports that.
func (p *proc) drainExited(handle func(*message)) {
	limit := time.NewTimer(300 * time.Millisecond)
	defer limit.Stop()
	for {
		select {
		case m := <-p.iopubCh:
			handle(m)
		case <-p.iopubEOF:
			for {
				select {
				case m := <-p.iopubCh:
					handle(m)
				default:
					return
				}
			}
		case <-limit.C:
			return
		}
	}
}

// setEnvCode saves the current values of envs' keys and sets envs, in one
// expression that leaves no names in the user's namespace. A JSON object
// of strings is also a Python dict literal.
func setEnvCode(envs map[string]string) (string, error) {
	lit, err := json.Marshal(envs)
	if err != nil {
		return "", fmt.Errorf("encoding envs: %w", err)
	}
	return "(lambda os, sys, new: (setattr(sys, '_lizard_saved_env', {k: os.environ.get(k) for k in new}), os.environ.update(new)))" +
		"(__import__('os'), __import__('sys'), " + string(lit) + ")", nil
}

// restoreEnvCode puts back what setEnvCode saved, removing keys that were unset.
const restoreEnvCode = "(lambda os, saved: [os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v) for k, v in saved.items()])" +
	"(__import__('os'), __import__('sys').__dict__.pop('_lizard_saved_env', {}))"

// reseedCode reseeds the random generators a fork would otherwise share.
const reseedCode = "(lambda sys: (__import__('random').seed(), sys.modules['numpy'].random.seed() if 'numpy' in sys.modules else None))(__import__('sys'))"

// updateEnvCode sets set and removes unset in os.environ for good, in one
// expression that leaves no names behind. JSON objects and lists of
// strings are also Python literals.
func updateEnvCode(set map[string]string, unset []string) (string, error) {
	if set == nil {
		set = map[string]string{}
	}
	if unset == nil {
		unset = []string{}
	}
	s, err := json.Marshal(set)
	if err != nil {
		return "", fmt.Errorf("encoding envs: %w", err)
	}
	u, err := json.Marshal(unset)
	if err != nil {
		return "", fmt.Errorf("encoding envs: %w", err)
	}
	return "(lambda os, new, gone: (os.environ.update(new), [os.environ.pop(k, None) for k in gone]))" +
		"(__import__('os'), " + string(s) + ", " + string(u) + ")", nil
}

// importCode imports modules by name, binding nothing in the namespace.
func importCode(modules []string) (string, error) {
	b, err := json.Marshal(modules)
	if err != nil {
		return "", fmt.Errorf("encoding modules: %w", err)
	}
	return "(lambda im, mods: [im.import_module(m) for m in mods])(__import__('importlib'), " + string(b) + ")", nil
}
