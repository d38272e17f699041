// Package jupyter runs IPython kernels and talks to them over the Jupyter
// messaging protocol (v5.3, HMAC-signed, over ZeroMQ), turning their output
// into the API's execute events.
//
// STUB: the signatures below are the contract; the implementation is being written.
package jupyter

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
)

// Config says how to start a kernel.
type Config struct {
	// Python is the interpreter with ipykernel installed; the kernel runs as
	// Python -m ipykernel_launcher -f CONNECTION_FILE.
	Python     string
	Cwd        string
	Env        []string            // the kernel's whole environment
	Credential *syscall.Credential // nil: run as the agent's own user
	RuntimeDir string              // where connection files are written
}

// Request is one execution.
type Request struct {
	Code    string
	Timeout time.Duration     // 0: no limit
	Envs    map[string]string // set for this call only, restored after
}

// Kernel is one running ipykernel process and the sockets to it.
type Kernel struct{}

// Start launches a kernel and returns once it answers kernel_info.
func Start(ctx context.Context, cfg Config) (*Kernel, error) {
	return nil, errors.New("jupyter: not implemented")
}

// Execute runs req.Code, calling emit for every event in order and last for
// an "end" event with the execution count. Calls are queued, never
// interleaved. Errors in the code (including TimeoutError and a kernel that
// died) are events, not returned errors; ctx cancellation interrupts the
// kernel and returns ctx.Err().
func (k *Kernel) Execute(ctx context.Context, req Request, emit func(api.ExecuteEvent)) error {
	return errors.New("jupyter: not implemented")
}

// Interrupt sends SIGINT to the kernel.
func (k *Kernel) Interrupt() error { return errors.New("jupyter: not implemented") }

// Restart replaces the kernel process with a fresh one: variables are gone.
func (k *Kernel) Restart(ctx context.Context) error { return errors.New("jupyter: not implemented") }

// Close ends the kernel process and closes its sockets.
func (k *Kernel) Close() error { return nil }
