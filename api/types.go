// Package api holds the wire types of Lizard's HTTP API v1, as described in
// openapi.yaml beside this file. The server, the agent and the Go client all
// speak these types, and a test keeps them in step with the OpenAPI document.
//
// Sandbox-scoped operations (execute, contexts, process, files) are served by
// the agent inside each sandbox under the same paths without the
// "/v1/sandboxes/{id}" prefix; the server authenticates the caller and proxies
// them through unchanged.
package api

import (
	"bytes"
	"encoding/json"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"
)

// AgentPort is the TCP port the agent listens on inside every sandbox.
const AgentPort = 49983

// Error is the body of every non-2xx response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes, one per HTTP status; clients map them back to typed errors.
const (
	CodeInvalidArgument  = "invalid_argument"   // 400
	CodeUnauthenticated  = "unauthenticated"    // 401
	CodeForbidden        = "forbidden"          // 403: the key may not do this (a sandbox's key, where a project key is needed)
	CodeNotFound         = "not_found"          // 404
	CodeConflict         = "conflict"           // 409
	CodeGone             = "gone"               // 410
	CodeMethodNotAllowed = "method_not_allowed" // 405: the path is served with other methods (Allow)
	CodeTooLarge         = "too_large"          // 413
	CodeRateLimited      = "rate_limited"       // 429
	CodeInternal         = "internal"           // 500
	CodeBadGateway       = "bad_gateway"        // 502: the sandbox's agent did not answer
	CodeUnavailable      = "unavailable"        // 503
	CodeDiskFull         = "disk_full"          // 507: the server's disk is full
)

// Sandbox states.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StatePaused   = "paused"
	StateKilled   = "killed"
	StateExpired  = "expired"
	StateFailed   = "failed"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Template string `json:"template,omitempty"` // default "interpreter"
	// TimeoutMs bounds the sandbox's life; nil means the default (300000),
	// 0 means it never expires.
	TimeoutMs   *int64            `json:"timeoutMs,omitempty"`
	Envs        map[string]string `json:"envs,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	LizardToken bool              `json:"lizardToken,omitempty"`
	// Resource overrides within the server's maxima; nil means the
	// server's default. MemoryMb bounds the sandbox's memory, Cpus its CPU
	// time (1.5 = one and a half cores), DiskMb its writable layer.
	MemoryMb *int64   `json:"memoryMb,omitempty"`
	Cpus     *float64 `json:"cpus,omitempty"`
	DiskMb   *int64   `json:"diskMb,omitempty"`
	// AllowInternet false takes all network egress away from the sandbox;
	// nil or true leaves what the server allows (--egress).
	AllowInternet *bool `json:"allowInternet,omitempty"`
	// SnapshotID restores the sandbox from a snapshot instead of booting
	// Template: its memory, kernels, processes and files come from the
	// snapshot. Envs cannot change the restored processes' environment.
	SnapshotID string `json:"snapshotId,omitempty"`
	// OnTimeout is what happens when the timeout passes: "kill" (default)
	// or "pause".
	OnTimeout string `json:"onTimeout,omitempty"`
	// PauseMemory false has the sandbox's pauses (at its timeout, and
	// explicit ones that do not say) keep its disk alone: no memory, a
	// fresh boot at resume (docs/lifecycle.md). nil or true: memory too.
	PauseMemory *bool `json:"pauseMemory,omitempty"`
	// Volumes are the project's persistent volumes to mount, each at its
	// path (docs/volumes.md).
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// PublicPorts lets anyone who has a port's URL reach the sandbox's
	// exposed ports, without the project's key or the sandbox's access
	// token (docs/ports.md).
	PublicPorts bool `json:"publicPorts,omitempty"`
	// PortsHost, when set, is the Host header requests to the sandbox's
	// ports carry in place of the caller's, "${PORT}" replaced by the
	// port (E2B's maskRequestHost; docs/ports.md). The caller's goes in
	// X-Forwarded-Host.
	PortsHost string `json:"portsHost,omitempty"`
	// Network is the sandbox's egress by domain name (docs/network.md);
	// nil: the server's --network-default, if any.
	Network *NetworkPolicy `json:"network,omitempty"`
}

// NetworkPolicy is a sandbox's egress by domain name (docs/network.md).
type NetworkPolicy struct {
	// Default is what happens to names and addresses no rule names:
	// "allow" (when empty) or "deny".
	Default string `json:"default,omitempty"`
	// Allow and Deny hold domain names ("api.example.com"), wildcards
	// ("*.example.com": any name under it), IPv4 addresses and prefixes,
	// optionally with a port ("203.0.113.7/32:5432"). Deny wins.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Ports are the TCP ports checked by name through the node's proxy
	// (default 80 and 443).
	Ports []int `json:"ports,omitempty"`
	// Inject sets headers on requests to a domain (secrets at the egress).
	Inject []HeaderRule `json:"inject,omitempty"`
}

// HeaderRule sets Headers (values may hold {{ secrets.NAME }}) on requests
// to Domain.
type HeaderRule struct {
	Domain  string            `json:"domain"`
	Headers map[string]string `json:"headers"`
}

// UpdateNetworkRequest is the body of PATCH /v1/sandboxes/{id}/network:
// each field given replaces the policy's, those absent are kept. New
// connections follow it at once; open ones are ended only with Cut.
type UpdateNetworkRequest struct {
	Default *string       `json:"default,omitempty"`
	Allow   *[]string     `json:"allow,omitempty"`
	Deny    *[]string     `json:"deny,omitempty"`
	Ports   *[]int        `json:"ports,omitempty"`
	Inject  *[]HeaderRule `json:"inject,omitempty"`
	Cut     bool          `json:"cut,omitempty"`
}

// NetworkLog is the body of GET /v1/sandboxes/{id}/network/log: the
// sandbox's newest egress decisions (at most 1000), oldest first.
type NetworkLog struct {
	Entries []NetworkLogEntry `json:"entries"`
}

// NetworkLogEntry is one egress decision. Kind is dns, http or tls; Addr
// the address connected to (or answered); BytesOut and BytesIn what the
// connection carried each way once it ended.
type NetworkLogEntry struct {
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Name     string    `json:"name,omitempty"`
	Addr     string    `json:"addr,omitempty"`
	Port     int       `json:"port,omitempty"`
	Allowed  bool      `json:"allowed"`
	Reason   string    `json:"reason,omitempty"`
	BytesOut int64     `json:"bytesOut,omitempty"`
	BytesIn  int64     `json:"bytesIn,omitempty"`
}

// VolumeMount mounts volume Name at Path inside a sandbox.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// SandboxVolume is a volume a sandbox mounts, as reported (VolumeMount is
// the request's: the two differ in that requests refuse unknown fields).
type SandboxVolume struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	Name   string `json:"name"`
	SizeMb int64  `json:"sizeMb,omitempty"` // default 1024
}

// Volume is a project's persistent volume.
type Volume struct {
	Name      string    `json:"name"`
	VolumeID  string    `json:"volumeId"`
	SizeMb    int64     `json:"sizeMb"`
	CreatedAt time.Time `json:"createdAt"`
}

// VolumeList is the body of GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// SetSecretRequest is the body of PUT /v1/secrets/{name}.
type SetSecretRequest struct {
	Value string `json:"value"`
	// Hosts are the names and wildcards (*.example.com) the secret may
	// be sent to: a policy's inject rule for any other is refused, and
	// so is a request to any other at the egress. Required.
	Hosts []string `json:"hosts"`
	// AllowHTTP lets it go over plain HTTP to them too (in the clear).
	AllowHTTP bool `json:"allowHttp,omitempty"`
}

// Secret is a project's secret as the API tells of it: never its value.
type Secret struct {
	Name string `json:"name"`
	// Hosts are where it may be sent; empty for a secret set before
	// secrets named their hosts, which is sent nowhere until set again.
	Hosts     []string  `json:"hosts"`
	AllowHTTP bool      `json:"allowHttp"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}

// What OnTimeout may say.
const (
	OnTimeoutKill  = "kill"
	OnTimeoutPause = "pause"
)

// PauseRequest is the optional body of POST /v1/sandboxes/{id}/pause.
// WaitDurable answers only once the image is in the image store.
type PauseRequest struct {
	WaitDurable bool `json:"waitDurable,omitempty"`
	// Memory false keeps the sandbox's disk alone: its files stay, its
	// processes and memory go, and it boots fresh at resume. It holds
	// for later pauses too (as CreateSandboxRequest.PauseMemory); nil
	// keeps the sandbox's setting.
	Memory *bool `json:"memory,omitempty"`
}

// ResumeRequest is the optional body of POST /v1/sandboxes/{id}/resume.
// TimeoutMs, when set, replaces the time the sandbox had left when paused.
type ResumeRequest struct {
	TimeoutMs *int64 `json:"timeoutMs,omitempty"`
	// Memory false asks for a fresh boot over the sandbox's disk (E2B's
	// on_resume="reboot"): what a sandbox paused with memory false does;
	// one paused with its memory is refused (409), not restored silently.
	Memory *bool `json:"memory,omitempty"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork: Count (default
// 1, at most 16) new sandboxes, each a copy of the running sandbox.
type ForkRequest struct {
	Count     int               `json:"count,omitempty"`
	TimeoutMs *int64            `json:"timeoutMs,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// Snapshot is a saved copy of a sandbox (memory, kernels, processes and
// files) that new sandboxes can be created from.
type Snapshot struct {
	SnapshotID string    `json:"snapshotId"`
	SandboxID  string    `json:"sandboxId"`
	ProjectID  string    `json:"projectId"`
	Template   string    `json:"template"`
	CreatedAt  time.Time `json:"createdAt"`
	SizeBytes  int64     `json:"sizeBytes"`
	// Durable: its image is in the image store (docs/storage.md).
	Durable bool `json:"durable"`
	// Name is the name it was taken with, while no newer snapshot of the
	// project has taken it; "" none.
	Name string `json:"name,omitempty"`
}

// SnapshotRequest is the optional body of POST
// /v1/sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	// Name names the snapshot in its project; a snapshot that held it
	// keeps being, unnamed. Creates take the name in place of its ID.
	Name string `json:"name,omitempty"`
}

// SnapshotList is the body of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// Sandbox is what the API tells about one sandbox. Envs are never returned:
// they may hold secrets.
type Sandbox struct {
	SandboxID string            `json:"sandboxId"`
	ProjectID string            `json:"projectId"`
	Template  string            `json:"template"`
	State     string            `json:"state"`
	TimeoutMs int64             `json:"timeoutMs"`
	Metadata  map[string]string `json:"metadata"`
	CreatedAt time.Time         `json:"createdAt"`
	// ExpiresAt is absent when the sandbox never expires.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// EndedAt is set once the sandbox has been killed, expired or failed.
	EndedAt *time.Time `json:"endedAt,omitempty"`
	// The resources it runs with (its create's, or the server's defaults);
	// 0 when the server sets no bound.
	MemoryMb int64   `json:"memoryMb,omitempty"`
	Cpus     float64 `json:"cpus,omitempty"`
	DiskMb   int64   `json:"diskMb,omitempty"`
	// ParentSandboxID is the sandbox whose lizardToken created this one.
	ParentSandboxID string `json:"parentSandboxId,omitempty"`
	// Volumes it mounts.
	Volumes []SandboxVolume `json:"volumes,omitempty"`
	// AccessToken opens its exposed ports to whoever holds it
	// (?lizard_access_token= or X-Lizard-Access-Token); PublicPorts says
	// no credential is needed; PortsDomain, when the server has one,
	// serves port P at P-<sandboxId>.<PortsDomain> (docs/ports.md).
	AccessToken string `json:"accessToken,omitempty"`
	PublicPorts bool   `json:"publicPorts,omitempty"`
	PortsDomain string `json:"portsDomain,omitempty"`
	// PortsHost is the Host its ports' requests carry, when it was
	// created with one.
	PortsHost string `json:"portsHost,omitempty"`
	// Network is its egress policy by name, when it has one.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Durable: it is paused and its image is in the image store, so it
	// outlives the node that paused it (docs/storage.md).
	Durable bool `json:"durable"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// SetTimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout. The new
// deadline counts from now; 0 means never.
type SetTimeoutRequest struct {
	TimeoutMs *int64 `json:"timeoutMs"`
}

// Health is the body of GET /v1/health (server) and GET /health (agent).
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version,omitempty"`
}

// ExecuteRequest is the body of POST /execute. The response is a stream of
// ExecuteEvent, one JSON object per line (application/x-ndjson), ending with
// an event of type "end".
type ExecuteRequest struct {
	Code      string            `json:"code"`
	Language  string            `json:"language,omitempty"`  // python (default), javascript, bash, typescript, r, java
	ContextID string            `json:"contextId,omitempty"` // default: the language's default context
	TimeoutMs *int64            `json:"timeoutMs,omitempty"` // default 60000; 0 = no limit
	Envs      map[string]string `json:"envs,omitempty"`      // for this call only
	// Bundle asks for every representation of each Python result in the
	// event's Bundle, beside the richest one (E2B's surface needs them all).
	Bundle bool `json:"bundle,omitempty"`
	// Stateful runs a javascript or typescript call with no context in the
	// sandbox's stateful default context of its language (made on first
	// use: one Node process keeps the variables), as E2B's default kernel
	// does; E2B's surface sets it. Without it javascript runs per call.
	Stateful bool `json:"stateful,omitempty"`
}

// Execute event types.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventResult = "result"
	EventError  = "error"
	EventEnd    = "end"
	// EventAbort ends a stream the server cut because the sandbox stopped
	// during the call (killed, expired, died); its Abort carries the API
	// error the call would have got before it began (410 gone).
	EventAbort = "abort"
)

// Abort is the API error an NDJSON stream ended with ("abort" event).
type Abort struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ExecuteEvent is one line of an /execute stream.
type ExecuteEvent struct {
	Type           string          `json:"type"`
	Text           string          `json:"text,omitempty"`   // stdout, stderr
	Result         *Result         `json:"result,omitempty"` // result
	Error          *ExecutionError `json:"error,omitempty"`  // error
	ExecutionCount int             `json:"executionCount,omitempty"`
	Abort          *Abort          `json:"abort,omitempty"` // abort
	// Bundle is a result's whole MIME bundle, as IPython's
	// display_formatter made it (images base64, application/json a JSON
	// value), when the request asked for it (ExecuteRequest.Bundle). It
	// sits beside Result, not in it, so that a Result stays one value.
	Bundle map[string]json.RawMessage `json:"bundle,omitempty"`
}

// Result types.
const (
	ResultTypeResult  = "result"  // Jupyter execute_result: the last expression's value
	ResultTypeDisplay = "display" // Jupyter display_data, such as plt.show()
)

// Result is one output of a run with exactly one MIME type, the richest the
// output offered. Images are base64.
type Result struct {
	Type string `json:"type"`
	Mime string `json:"mime"`
	Data string `json:"data"`
}

// MaxResultBytes bounds the results (display data: images, HTML, JSON) of
// one run of code, all together, as their lines of the /execute stream
// count them: the agent sends an error event (ResultTooLarge, "result too
// large: N bytes, limit M") in place of a result past it. Readers of the
// stream hold a line whole, and the sandbox's code may make one as long as
// the kernel's frame (256 MiB).
const MaxResultBytes = 32 << 20

// ErrorNameResultTooLarge names the error event that stands in for a
// result past MaxResultBytes, or ends a stream whose line passed
// MaxExecuteLine.
const ErrorNameResultTooLarge = "ResultTooLarge"

// Names of the error events of runs that end notably, made by Lizard
// rather than raised by the code; the proxy, metrics and events tell a
// call's outcome by them, and only this file spells them.
const (
	// ErrorNameTimeout: the run passed its timeoutMs (every language).
	ErrorNameTimeout = "TimeoutError"
	// ErrorNameKernelDied: the Python kernel died during the run, its
	// message saying why (killed, perhaps for memory).
	ErrorNameKernelDied = "KernelDiedError"
)

// MaxExecuteLine bounds one line of an /execute stream as the agent sends
// it: a result within MaxResultBytes, or an output chunk or error, each
// well under a MiB. A reader refuses a longer line rather than hold it.
const MaxExecuteLine = MaxResultBytes + 1<<20

// ExecutionError is an error raised by the code, not by the request.
type ExecutionError struct {
	Name      string `json:"name"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
}

// CreateContextRequest is the body of POST /contexts.
type CreateContextRequest struct {
	Language string `json:"language,omitempty"` // default python; typescript needs Stateful; r and java are kernels, stateful anyway
	Cwd      string `json:"cwd,omitempty"`      // default the sandbox user's home
	// Stateful makes a javascript (or typescript) context one Node process for all its
	// calls: variables persist, the last expression's value is a result and
	// top-level await works, as in E2B's JavaScript kernel (the E2B surface
	// creates its JavaScript contexts so). Without it each call is a fresh
	// process.
	Stateful bool `json:"stateful,omitempty"`
	// User is "root" or the sandbox user (the default), as for a process:
	// who runs the context's kernel or calls. E2B's surface makes its
	// contexts root's, as E2B's interpreter runs its kernels.
	User string `json:"user,omitempty"`
}

// Context is one execution context: its own kernel, variables and working
// directory.
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// ContextList is the body of GET /contexts.
type ContextList struct {
	Contexts []Context `json:"contexts"`
}

// ProcessRequest is the body of POST /process. Exactly one of Cmd (run by
// bash -c) and Args (run as is) is set. The response is a stream of
// ProcessEvent lines ending with one of type "end".
type ProcessRequest struct {
	Cmd       string            `json:"cmd,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Envs      map[string]string `json:"envs,omitempty"`
	TimeoutMs *int64            `json:"timeoutMs,omitempty"` // default none
	Stdin     string            `json:"stdin,omitempty"`
}

// ProcessEvent is one line of a /process stream. An "end" event carries the
// exit code, and Error when the process could not start or timed out.
type ProcessEvent struct {
	Type     string `json:"type"` // stdout, stderr, end, abort
	Text     string `json:"text,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Error    string `json:"error,omitempty"`
	Abort    *Abort `json:"abort,omitempty"`
}

// Background processes and terminals (POST /processes, docs/processes.md).

// ProcessStartRequest is the body of POST /processes. Exactly one of Cmd
// (run by bash -c) and Args (run as is) is set, except with Pty, where
// neither means the user's login shell.
type ProcessStartRequest struct {
	Cmd  string            `json:"cmd,omitempty"`
	Args []string          `json:"args,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	// Stdin keeps the process's stdin open for POST .../stdin; without it
	// stdin is /dev/null. A terminal's input is always open.
	Stdin bool `json:"stdin,omitempty"`
	// Pty runs the process in a terminal of that size (raw output bytes,
	// TERM=xterm-256color).
	Pty       *PtySize `json:"pty,omitempty"`
	TimeoutMs *int64   `json:"timeoutMs,omitempty"` // default none
	// TimeoutKills is what timeoutMs kills: "group" (the default: the
	// process and all it started) or "process" (the process alone, as
	// E2B's envd does at a command's deadline: an app a shell opened
	// outlives it).
	TimeoutKills string `json:"timeoutKills,omitempty"`
	// Tag is the caller's name for the process (at most 256 bytes).
	Tag string `json:"tag,omitempty"`
	// User is "root" or the sandbox user (the default).
	User string `json:"user,omitempty"`
}

// PtySize is a terminal's size, each in 1..1000; the body of POST
// /processes/{pid}/resize.
type PtySize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// ProcessInfo describes a background process, running or ended.
type ProcessInfo struct {
	Pid       int       `json:"pid"`
	Tag       string    `json:"tag,omitempty"`
	Cmd       string    `json:"cmd,omitempty"`
	Args      []string  `json:"args"` // what was run: for Cmd, bash -c Cmd
	Cwd       string    `json:"cwd"`
	User      string    `json:"user"`
	StartedAt time.Time `json:"startedAt"`
	Pty       *PtySize  `json:"pty,omitempty"` // its terminal's current size
	Stdin     bool      `json:"stdin"`         // whether its stdin takes input now
	Running   bool      `json:"running"`
	// ExitCode is set once it ended: 128+N when killed by signal N, 124
	// when it ran past timeoutMs.
	ExitCode *int       `json:"exitCode,omitempty"`
	EndedAt  *time.Time `json:"endedAt,omitempty"`
	Error    string     `json:"error,omitempty"` // why it ended, when not by itself
}

// ProcessList is the answer of GET /processes, running ones first, then
// ended ones, each by start.
type ProcessList struct {
	Processes []ProcessInfo `json:"processes"`
}

// ProcessStdinRequest is the JSON body of POST /processes/{pid}/stdin (a
// body of another content type is the bytes themselves).
type ProcessStdinRequest struct {
	Data []byte `json:"data"` // base64 in JSON
}

// ProcessSignalRequest is the body of POST /processes/{pid}/signal.
type ProcessSignalRequest struct {
	// Signal is a name with or without SIG (TERM, SIGKILL, USR1) or a
	// number ("9").
	Signal string `json:"signal"`
}

// Types of the events of a background process's output stream (GET
// /processes/{pid}/output), beside EventStdout, EventStderr, EventEnd and
// EventAbort.
const (
	// OutputPty carries a terminal's raw output bytes in Data.
	OutputPty = "pty"
	// OutputDropped says that Dropped bytes of output were lost to this
	// reader: it fell behind the process by more than its output buffer
	// (or, first in a stream, the buffer had already let them go).
	OutputDropped = "dropped"
)

// ProcessOutputEvent is one line of GET /processes/{pid}/output: the
// process's buffered recent output, then its live output, then one "end"
// carrying the exit code (or "abort" when the sandbox ended).
type ProcessOutputEvent struct {
	Type     string `json:"type"` // stdout, stderr, pty, dropped, end, abort
	Text     string `json:"text,omitempty"`
	Data     []byte `json:"data,omitempty"` // pty: raw bytes, base64 in JSON
	Dropped  int64  `json:"dropped,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Error    string `json:"error,omitempty"`
	Abort    *Abort `json:"abort,omitempty"`
}

// ProcessControl is a text frame of a process's WebSocket (GET
// /processes/{pid}/ws); binary frames are raw bytes both ways. The client
// sends "resize" (Cols, Rows) or "eof" (close stdin); the agent sends
// "dropped" and, last, "end" with the exit code, then closes.
type ProcessControl struct {
	Type     string `json:"type"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	Dropped  int64  `json:"dropped,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Error    string `json:"error,omitempty"`
}

// EntryInfo describes one file or directory in a sandbox. A symlink is
// described itself, not what it points to.
type EntryInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Type    string    `json:"type"` // file, dir, symlink, other
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits, e.g. 0o644
	ModTime time.Time `json:"modTime"`
	// Permissions is the ls -l form of the type and mode, e.g. "-rw-r--r--".
	Permissions string `json:"permissions"`
	// Owner and Group name the file's owner (the uid or gid in decimal when
	// the sandbox has no name for it).
	Owner string `json:"owner"`
	Group string `json:"group"`
	// SymlinkTarget is where a symlink points, as stored in it.
	SymlinkTarget string `json:"symlinkTarget,omitempty"`
	// Metadata is the file's metadata (an upload's metadata[key]), kept
	// as its user.e2b.* extended attributes; none is left out.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Filesystem event types of a /files/watch stream, as inotify reports
// them: a rename reports the old name as "rename" and the new one as
// "create", as E2B's FilesystemEvent does.
const (
	FileCreate = "create"
	FileWrite  = "write"
	FileRemove = "remove"
	FileRename = "rename"
	FileChmod  = "chmod"
)

// FileEvent is one line of a GET /files/watch stream. Name is the path
// relative to the watched directory. A stream the server cuts because the
// sandbox ended ends with one line of type "abort" (Abort set).
type FileEvent struct {
	Type  string    `json:"type"` // create, write, remove, rename, chmod, abort
	Name  string    `json:"name,omitempty"`
	Time  time.Time `json:"time,omitzero"`
	Abort *Abort    `json:"abort,omitempty"`
	// Entry describes the file as it is when the event is read, asked
	// for with includeEntry: create, write and chmod events of a file
	// still there.
	Entry *EntryInfo `json:"entry,omitempty"`
}

// SandboxMetric is one sample of a sandbox's use of its machine, taken by
// the node that runs it.
type SandboxMetric struct {
	Timestamp time.Time `json:"timestamp"`
	// CPUUsedPct is the CPU time used since the previous sample, as a
	// percentage of CPUCount CPUs (100: all of them busy).
	CPUUsedPct float64 `json:"cpuUsedPct"`
	CPUCount   float64 `json:"cpuCount"`
	// MemUsed is the sandbox's memory its host cannot reclaim (bytes);
	// MemTotal its limit.
	MemUsed  int64 `json:"memUsed"`
	MemTotal int64 `json:"memTotal"`
	// DiskUsed is what its writable layer holds (bytes); DiskTotal its
	// limit.
	DiskUsed  int64 `json:"diskUsed"`
	DiskTotal int64 `json:"diskTotal"`
}

// SandboxMetrics is the body of GET /v1/sandboxes/{id}/metrics: the
// samples of the last minutes, oldest first.
type SandboxMetrics struct {
	Metrics []SandboxMetric `json:"metrics"`
}

// EntryList is the body of GET /files/list.
type EntryList struct {
	Entries []EntryInfo `json:"entries"`
}

// NullAt returns where a JSON request body holds a null, as a path such as
// "envs.HOME" ("" for the body itself), and whether it holds one. No field
// of a request is nullable: a field is given a value or left out. Go's
// decoder would read a null as the zero value ("" for an env value, {}
// for the whole body), which is never what the sender meant. A body that
// is not valid JSON has no null here; decoding it reports why.
func NullAt(body []byte) (path string, found bool) {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return "", false
	}
	return nullIn(v, "")
}

func nullIn(v any, path string) (string, bool) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch v := v.(type) {
	case nil:
		return path, true
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, ok := nullIn(v[k], join(k)); ok {
				return p, true
			}
		}
	case []any:
		for i, e := range v {
			if p, ok := nullIn(e, join(strconv.Itoa(i))); ok {
				return p, true
			}
		}
	}
	return "", false
}

// IntegralNumbers returns body with every number that has a fraction or
// exponent but an integral value (6.0, 1e3) written as an integer. JSON
// Schema counts 6.0 as an integer, and so does the spec; Go's decoder
// would refuse it for an integer field. body is returned as is when it
// has no such number or is not valid JSON (decoding it reports why).
func IntegralNumbers(body []byte) []byte {
	if !bytes.ContainsAny(body, ".eE") {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return body
	}
	changed := false
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case json.Number:
			s := v.String()
			if !strings.ContainsAny(s, ".eE") {
				return v
			}
			r, ok := new(big.Rat).SetString(s)
			if !ok || !r.IsInt() || r.Num().BitLen() > 63 {
				return v
			}
			changed = true
			return json.Number(r.Num().String())
		case map[string]any:
			for k, e := range v {
				v[k] = walk(e)
			}
		case []any:
			for i, e := range v {
				v[i] = walk(e)
			}
		}
		return v
	}
	v = walk(v)
	if !changed || dec.More() {
		return body
	}
	out, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return out
}

// Template build event types (TemplateBuildEvent.type).
const (
	BuildEventStep  = "step"
	BuildEventLog   = "log"
	BuildEventDone  = "done"
	BuildEventError = "error"
)

// BuildTemplateRequest is the body of POST /v1/templates: a custom
// template named within the key's project, built from Recipe
// (docs/templates.md).
type BuildTemplateRequest struct {
	Name   string         `json:"name"`
	Recipe TemplateRecipe `json:"recipe"`
	// Registry are the credentials that pull Recipe.From's image. They
	// are used for this build's pull and kept nowhere: not in the
	// template's record, nor a log.
	Registry *RegistryAuth `json:"registry,omitempty"`
	// SkipCache builds the recipe again, every step run, even when the
	// project has a build of it or of a prefix of its steps (E2B's
	// skip_cache). Later builds of the same recipe are cached on it.
	SkipCache bool `json:"skipCache,omitempty"`
}

// RegistryAuth is a container registry's username and password (or
// token), or the name of the project's secret that holds the password
// (docs/secrets.md): one of Password and PasswordSecret.
type RegistryAuth struct {
	Username       string `json:"username"`
	Password       string `json:"password,omitempty"`
	PasswordSecret string `json:"passwordSecret,omitempty"`
}

// TemplateRecipe is what a custom template is made of, on top of a
// built-in base template. The CLI reads it from a YAML file.
type TemplateRecipe struct {
	Base string `json:"base,omitempty"` // default "interpreter"
	// From is an OCI or Docker image (by tag or digest) the template is
	// built on instead of a built-in base; the build records its digest
	// (Template.Digest).
	From string `json:"from,omitempty"`
	// Apt are Debian packages; Pip are pip requirements ("name" or
	// "name==version"), installed into the template's venv.
	Apt   []string       `json:"apt,omitempty"`
	Pip   []string       `json:"pip,omitempty"`
	Files []TemplateFile `json:"files,omitempty"`
	// Env is given to all code in the template's sandboxes (a create's
	// envs win); Workdir is where code runs and relative file paths start.
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	// Run are build commands, in order, after packages and files.
	Run []TemplateCommand `json:"run,omitempty"`
	// Start runs at boot, in the background, as the sandbox user.
	Start string `json:"start,omitempty"`
	// Ready is a shell command that exits 0 once Start is ready (a server
	// listening): polled every 100 ms at boot, and the template snapshot
	// is taken only once it passed.
	Ready string `json:"ready,omitempty"`
	// Steps run in order after the fixed parts above (which mean the
	// steps apt, pip, copy, run..., env, workdir, in that order).
	Steps []TemplateStep `json:"steps,omitempty"`
}

// TemplateStep is one step of a recipe: exactly one of its fields is set.
type TemplateStep struct {
	// Run is a build command; its user defaults to the last User step's
	// (root before any).
	Run *TemplateCommand `json:"run,omitempty"`
	// Copy are files (a directory tree is its files), with their parent
	// directories made.
	Copy []TemplateFile `json:"copy,omitempty"`
	// Env sets variables for later Run steps and the sandbox's code.
	Env map[string]string `json:"env,omitempty"`
	// Workdir is where later Run steps and the sandbox's code run; made
	// if missing.
	Workdir string `json:"workdir,omitempty"`
	// User ("root" or "user") runs later Run steps, the start command and
	// the sandbox's code.
	User    string           `json:"user,omitempty"`
	Apt     []string         `json:"apt,omitempty"`
	Pip     []string         `json:"pip,omitempty"`
	Symlink *TemplateSymlink `json:"symlink,omitempty"`
	// Npm installs npm packages, fetched on the host (their scripts not
	// run) and put in place in the build sandbox.
	Npm *TemplateNpm `json:"npm,omitempty"`
}

// TemplateNpm is an npm step: Packages installed in the working
// directory's node_modules as the step's user (with a package.json when
// it has none; Dev lists them as devDependencies), or, Global, in
// /usr/local (lib/node_modules, their commands in bin) as root.
type TemplateNpm struct {
	Packages []string `json:"packages"`
	Global   bool     `json:"global,omitempty"`
	Dev      bool     `json:"dev,omitempty"`
}

// TemplateSymlink makes Path a symbolic link to Target (replacing what
// is at Path, as ln -sfn).
type TemplateSymlink struct {
	Target string `json:"target"`
	Path   string `json:"path"`
}

// TemplateFile is a file copied into the template.
type TemplateFile struct {
	Path string `json:"path"` // absolute path inside the template
	// Content is the file's bytes, base64; left out of responses.
	Content string `json:"content,omitempty"`
	Mode    int64  `json:"mode,omitempty"`  // permission bits; default 0644
	Owner   string `json:"owner,omitempty"` // "user" (default) or "root"
	Size    int64  `json:"size,omitempty"`  // in responses
}

// TemplateCommand is one build command, run by /bin/sh -c.
type TemplateCommand struct {
	Cmd  string `json:"cmd"`
	User string `json:"user,omitempty"` // "root" (default; the sandbox's root, not the host's) or "user"
}

// Template is a built custom template.
type Template struct {
	Name      string `json:"name"`
	ProjectID string `json:"projectId"`
	Base      string `json:"base"`
	Key       string `json:"key"` // the hash of its recipe
	// Digest is the digest of the linux/amd64 image Recipe.From named when
	// it was built: the image a rebuild of the same key pulls.
	Digest    string         `json:"digest,omitempty"`
	CreatedAt time.Time      `json:"createdAt"`
	BuildMs   int64          `json:"buildMs"`
	SizeBytes int64          `json:"sizeBytes"`
	Recipe    TemplateRecipe `json:"recipe"`
}

// TemplateList is the body of GET /v1/templates.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// TemplateBuildEvent is one line of POST /v1/templates' NDJSON stream:
// steps and their output as they come, then done (with the template) or
// error (with the failing step's name and its last output).
type TemplateBuildEvent struct {
	Type     string    `json:"type"`
	Step     int       `json:"step,omitempty"`
	Total    int       `json:"total,omitempty"`
	Name     string    `json:"name,omitempty"` // of the step
	Text     string    `json:"text,omitempty"` // a log line
	Cached   bool      `json:"cached,omitempty"`
	Template *Template `json:"template,omitempty"`
	Code     string    `json:"code,omitempty"`
	Message  string    `json:"message,omitempty"`
	Log      string    `json:"log,omitempty"` // the failing step's last output
}

// Lifecycle event types (Event.type, docs/events.md). Each names what
// happened to the sandbox; Event.data.state is its state afterwards.
const (
	LifecycleCreated  = "sandbox.created"   // a new sandbox runs (made, restored from a snapshot, or forked)
	LifecyclePaused   = "sandbox.paused"    // checkpointed to disk and stopped
	LifecycleResumed  = "sandbox.resumed"   // running again after a pause
	LifecycleForked   = "sandbox.forked"    // copied into data.sandboxIds
	LifecycleSnapshot = "sandbox.snapshot"  // saved as snapshot data.snapshotId, still running
	LifecycleKilled   = "sandbox.killed"    // ended through the API
	LifecycleExpired  = "sandbox.expired"   // ended when its timeout (or paused retention) passed
	LifecycleFailed   = "sandbox.failed"    // ended on its own: data.reason says why (died, out of memory, could not start)
	LifecycleNodeLost = "sandbox.node_lost" // ended because its cluster node missed its lease (data.node)
	LifecycleMoved    = "sandbox.moved"     // moved off a draining node to data.node (from data.from; data.downtimeMs)
	// Runs that ended notably; the sandbox lives on. data.reason is the
	// run's error message.
	LifecycleCallTimeout     = "call.timeout"       // a run passed its timeoutMs
	LifecycleCallKernelDied  = "call.kernel_died"   // the Python kernel died during a run and was restarted
	LifecycleCallOutOfMemory = "call.out_of_memory" // ... killed by SIGKILL, most likely for memory
)

// Event is one lifecycle event of a sandbox (GET /v1/events). IDs grow:
// a reader resumes after the last it saw (?after=).
type Event struct {
	ID        int64     `json:"id"`
	Type      string    `json:"type"`
	Time      time.Time `json:"time"`
	ProjectID string    `json:"projectId"`
	SandboxID string    `json:"sandboxId"`
	// Metadata is the sandbox's, as it was when the event happened.
	Metadata map[string]string `json:"metadata"`
	Data     EventData         `json:"data"`
}

// EventData is what an event says beyond its type; fields that do not
// apply to a type are left out.
type EventData struct {
	// State is the sandbox's state after the event.
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Template, SnapshotID (restored from, or saved as), ForkedFrom and
	// ParentSandboxID (the sandbox whose lizardToken created it) describe
	// a created sandbox; SnapshotID also a snapshot.
	Template        string `json:"template,omitempty"`
	SnapshotID      string `json:"snapshotId,omitempty"`
	ForkedFrom      string `json:"forkedFrom,omitempty"`
	ParentSandboxID string `json:"parentSandboxId,omitempty"`
	// SandboxIDs are a fork's copies.
	SandboxIDs []string `json:"sandboxIds,omitempty"`
	// Node is the lost node of a sandbox.node_lost, the node a
	// sandbox.moved went to; From the node it left, DowntimeMs the stall
	// of its move (0 for a paused sandbox, which only changed home).
	Node       string `json:"node,omitempty"`
	From       string `json:"from,omitempty"`
	DowntimeMs int64  `json:"downtimeMs,omitempty"`
}

// EventList is one page of GET /v1/events. Next is the cursor of the
// following page (?after=Next); HasMore says whether it has events yet.
type EventList struct {
	Events  []Event `json:"events"`
	Next    int64   `json:"next"`
	HasMore bool    `json:"hasMore"`
}

// CreateWebhookRequest is the body of POST /v1/webhooks: where to send the
// project's events, and which types (none: every type).
type CreateWebhookRequest struct {
	URL   string   `json:"url"`
	Types []string `json:"types,omitempty"`
}

// Webhook is a URL a project's events are sent to (docs/events.md). Its
// secret, which signs every delivery, is shown once: in the answer to the
// create.
type Webhook struct {
	WebhookID string    `json:"webhookId"`
	URL       string    `json:"url"`
	Types     []string  `json:"types"`
	CreatedAt time.Time `json:"createdAt"`
	Secret    string    `json:"secret,omitempty"`
}

// WebhookList is the body of GET /v1/webhooks.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}

// Delivery states: pending (to be tried, or tried again at nextAttemptAt),
// delivered (a 2xx came back), failed (retried for the time allowed).
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// WebhookDelivery is one event sent (or being sent) to a webhook.
type WebhookDelivery struct {
	EventID   int64  `json:"eventId"`
	SandboxID string `json:"sandboxId"`
	State     string `json:"state"`
	// NextAttemptAt, while pending, is when it is tried next.
	NextAttemptAt *time.Time       `json:"nextAttemptAt,omitempty"`
	Attempts      []WebhookAttempt `json:"attempts"`
}

// WebhookAttempt is one try at a delivery: the receiver's HTTP status, or
// why none came back.
type WebhookAttempt struct {
	Attempt int       `json:"attempt"`
	Time    time.Time `json:"time"`
	Status  int       `json:"status,omitempty"`
	Error   string    `json:"error,omitempty"`
	TookMs  int64     `json:"tookMs"`
}

// WebhookDeliveryList is the body of GET /v1/webhooks/{id}/deliveries:
// the latest deliveries, newest first.
type WebhookDeliveryList struct {
	Deliveries []WebhookDelivery `json:"deliveries"`
}

// NodeDrain is the answer of POST /v1/nodes/{name}/drain (docs/cluster.md):
// the node takes no new sandboxes, and what ran on it was moved.
type NodeDrain struct {
	Node     string `json:"node"`
	Draining bool   `json:"draining"`
	// Moved are the sandboxes this drain moved, Left those it could not
	// (they mount volumes, or a move failed), each with why.
	Moved  []SandboxMove `json:"moved"`
	Left   []SandboxLeft `json:"left"`
	TookMs int64         `json:"tookMs"`
}

// SandboxMove is one sandbox moved off a draining node. A running one was
// paused, its image put in the image store and resumed on To (Resumed);
// DowntimeMs is from its pause to its resume, the stall its callers saw.
// A paused one was only re-homed: it resumes on To at its next call.
type SandboxMove struct {
	SandboxID  string `json:"sandboxId"`
	From       string `json:"from"`
	To         string `json:"to"`
	Resumed    bool   `json:"resumed"`
	DowntimeMs int64  `json:"downtimeMs"`
}

// SandboxLeft is a sandbox a drain left on its node, and why.
type SandboxLeft struct {
	SandboxID string `json:"sandboxId"`
	Reason    string `json:"reason"`
}

// NodeList is the answer of GET /v1/nodes: the cluster's registered
// nodes, by name.
type NodeList struct {
	Nodes []NodeInfo `json:"nodes"`
}

// NodeInfo is one registered node (docs/cluster.md). Version is the
// Lizard version it registered with ("" a node of a release that reported
// none, taken as 0.1.0); Compatible whether this API process works with
// it and places sandboxes on it (same major version, and for 0.x the same
// minor). Live: its lease runs.
type NodeInfo struct {
	Name       string `json:"name"`
	Addr       string `json:"addr"`
	Version    string `json:"version"`
	Compatible bool   `json:"compatible"`
	Live       bool   `json:"live"`
	Draining   bool   `json:"draining"`
	Sandboxes  int    `json:"sandboxes"`
	Slots      int    `json:"slots"`
}

// NodeState is the answer of POST /v1/nodes/{name}/undrain.
type NodeState struct {
	Node     string `json:"node"`
	Draining bool   `json:"draining"`
	Live     bool   `json:"live"`
}

// Desktop sandboxes (docs/desktop.md): the screen, mouse, keyboard,
// windows and stream of a sandbox whose template runs an X desktop, under
// /v1/sandboxes/{id}/desktop/.

// DesktopScreen is the answer of GET /desktop/screen: the X screen's size
// in pixels.
type DesktopScreen struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

// DesktopCursor is the answer of GET /desktop/cursor and of POST
// /desktop/mouse: where the pointer is, in pixels from the top left.
type DesktopCursor struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// Mouse actions (DesktopMouseRequest.Action).
const (
	MouseMove   = "move"   // to (x, y)
	MouseClick  = "click"  // count clicks of button, at (x, y) when given
	MouseDown   = "down"   // press button, at (x, y) when given
	MouseUp     = "up"     // release button, at (x, y) when given
	MouseDrag   = "drag"   // press button at (x, y), move to (toX, toY), release
	MouseScroll = "scroll" // count steps in direction, at (x, y) when given
)

// Mouse buttons (DesktopMouseRequest.Button).
const (
	ButtonLeft   = "left"
	ButtonMiddle = "middle"
	ButtonRight  = "right"
)

// Scroll directions (DesktopMouseRequest.Direction).
const (
	ScrollUp    = "up"
	ScrollDown  = "down"
	ScrollLeft  = "left"
	ScrollRight = "right"
)

// DesktopMouseRequest is the body of POST /desktop/mouse. Coordinates are
// pixels from the screen's top left, 0 to MaxDesktopCoordinate.
type DesktopMouseRequest struct {
	Action    string `json:"action"`
	X         *int   `json:"x,omitempty"`
	Y         *int   `json:"y,omitempty"`
	ToX       *int   `json:"toX,omitempty"`
	ToY       *int   `json:"toY,omitempty"`
	Button    string `json:"button,omitempty"`    // default left
	Count     int    `json:"count,omitempty"`     // clicks (1 to 10) or scroll steps (1 to 100); default 1
	Direction string `json:"direction,omitempty"` // scroll's; default down
}

// MaxDesktopCoordinate is the largest coordinate a desktop call takes;
// larger, or negative, is a 400.
const MaxDesktopCoordinate = 16383

// Keyboard actions (DesktopKeyboardRequest.Action).
const (
	KeyboardType  = "type"  // type text as if typed on the keyboard
	KeyboardPress = "press" // press each of keys in turn, each a combination such as "ctrl+c"
)

// DesktopKeyboardRequest is the body of POST /desktop/keyboard. Text and
// key names reach xdotool as arguments, never through a shell.
type DesktopKeyboardRequest struct {
	Action  string   `json:"action"`
	Text    string   `json:"text,omitempty"`    // type's, at most 10,000 bytes
	Keys    []string `json:"keys,omitempty"`    // press's, 1 to 32 X keysym names joined by +
	DelayMs *int     `json:"delayMs,omitempty"` // type's delay between keys, 0 to 1,000; default 12
}

// DesktopOpenRequest is the body of POST /desktop/open: a file or URL
// opened with xdg-open, as the desktop would on a double click.
type DesktopOpenRequest struct {
	Target string `json:"target"`
}

// DesktopLaunchRequest is the body of POST /desktop/launch: an
// application started by its desktop entry's name (gtk-launch), such as
// "chromium" or "xfce4-terminal".
type DesktopLaunchRequest struct {
	App string `json:"app"`
}

// DesktopWindowList is the answer of GET /desktop/windows: the visible
// top-level windows.
type DesktopWindowList struct {
	Windows []DesktopWindow `json:"windows"`
}

// DesktopWindow is one visible window: its X id, title, WM_CLASS class,
// geometry, and whether it has the focus.
type DesktopWindow struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Class  string `json:"class"`
	X      int    `json:"x"`
	Y      int    `json:"y"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Active bool   `json:"active"`
}

// DesktopStreamRequest is the optional body of POST /desktop/stream.
type DesktopStreamRequest struct {
	// Control lets the viewer move the mouse and type; without it the
	// stream is view-only, enforced by the VNC server inside the sandbox.
	Control bool `json:"control,omitempty"`
	// TTLSeconds is how long the viewer's token opens the stream: 1 to
	// 86,400, default 3,600.
	TTLSeconds int `json:"ttlSeconds,omitempty"`
}

// DesktopViewer is a viewer of a desktop's stream (201 of POST
// /desktop/stream): a token of its own, good for that sandbox's stream
// alone, until it expires or the stream is stopped.
type DesktopViewer struct {
	ViewerID  string    `json:"viewerId"`
	Token     string    `json:"token"`
	Control   bool      `json:"control"`
	ExpiresAt time.Time `json:"expiresAt"`
	// WebSocketURL is the stream: RFB (VNC) over a WebSocket, the token in
	// its query, for noVNC or any VNC client that speaks WebSockets.
	WebSocketURL string `json:"websocketUrl"`
	// URL is the console's live view of the stream, the token in its
	// fragment.
	URL string `json:"url"`
}
