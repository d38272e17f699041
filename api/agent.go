package api

import (
	"strconv"
	"strings"
)

// The agent's own endpoints. Public ones are reached through the API at
// /v1/sandboxes/{sandboxId}/<path> (the server's proxy forwards exactly
// AgentPublicPaths); internal ones are called by the server alone, are
// marked x-internal in openapi.yaml, and are never forwarded.

// AgentPublicPaths are the agent routes the public API forwards, as
// net/http patterns relative to the agent (the proxy prefixes
// /v1/sandboxes/{id}). api/openapi_test.go checks them against the spec.
var AgentPublicPaths = []string{
	"/health",
	"/execute",
	"/contexts",
	"/contexts/{contextId}",
	"/contexts/{contextId}/restart",
	"/process",
	"/processes",
	"/processes/{pid}",
	"/processes/{pid}/output",
	"/processes/{pid}/ws",
	"/processes/{pid}/stdin",
	"/processes/{pid}/stdin/close",
	"/processes/{pid}/signal",
	"/processes/{pid}/resize",
	"/files",
	"/files/list",
	"/files/stat",
	"/files/mkdir",
	"/files/rename",
	"/files/watch",
}

// Internal agent endpoints, for the server only.
const (
	// AgentReadyPath answers once the default kernel runs with its
	// preloads imported (template snapshots wait for it).
	AgentReadyPath = "/ready"
	// AgentReseedPath gives a restored sandbox its identity (ReseedRequest).
	AgentReseedPath = "/reseed"
	// AgentDiskPath answers what the sandbox's root filesystem holds
	// (DiskUsage), for the node's metrics.
	AgentDiskPath = "/disk"
	// AgentTrustPath installs (or removes) the sandbox's egress CA
	// (TrustRequest).
	AgentTrustPath = "/trust"
	// AgentEnvPath answers the environment the agent gives code
	// (AgentEnv): what a pause keeping the disk alone saves, for the
	// fresh boot at resume to give it again.
	AgentEnvPath = "/env"
	// AgentHeapDumpPath starts sharing the default kernel's heap from a
	// file (docs/performance.md, "The preloaded heap shared from a
	// file"): it answers the kernel's dump as application/octet-stream,
	// which the node writes to HeapFile in the host directory mounted at
	// HeapMount. Served once per agent lifetime, and only by an agent
	// started with LIZARD_AGENT_SHARE_HEAP=1 (a template sandbox's).
	AgentHeapDumpPath = "/heap/dump"
	// AgentHeapWaitPath answers once the kernel has mapped its heap back
	// from HeapMount/HeapFile: HeapShare, or the kernel's error.
	AgentHeapWaitPath = "/heap/wait"
)

// Where a sandbox sees the shared heap: a read-only bind mount of a host
// directory, in the template sandbox and in every restore of it; the
// kernel maps its regions from HeapMount/HeapFile.
const (
	HeapMount = "/.lizard/heap"
	HeapFile  = "heap"
)

// HeapShare is the body of the agent's internal POST /heap/wait: what the
// kernel shared.
type HeapShare struct {
	// Regions is how many memory regions were mapped from the file.
	Regions int `json:"regions"`
	// Bytes is the address space they cover: the file's size.
	Bytes int64 `json:"bytes"`
	// Stored is the bytes not zero: the file's blocks on disk.
	Stored int64 `json:"stored"`
	// Millis is from the dump's first write until every region was
	// mapped back (the node's copy included).
	Millis int64 `json:"millis"`
}

// AgentEnv is the body of the agent's internal GET /env: KEY=VALUE.
type AgentEnv struct {
	Env []string `json:"env"`
}

// TrustRequest is the body of the agent's internal POST /trust: the
// certificate of the authority with which the node terminates the TLS of
// requests its network policy injects secrets into, to trust inside the
// sandbox; empty removes it (docs/secrets.md).
type TrustRequest struct {
	CertPEM string `json:"certPem"`
}

// DiskUsage is the body of the agent's internal GET /disk: statfs of the
// sandbox's root, whose writable layer is what its disk limit bounds.
type DiskUsage struct {
	UsedBytes  int64 `json:"usedBytes"`
	TotalBytes int64 `json:"totalBytes"`
}

// ReseedRequest is the body of the agent's internal POST /reseed: the
// identity of a sandbox restored from another's checkpoint (fork, snapshot,
// template snapshot, warm-pool claim) or resumed with a new environment.
type ReseedRequest struct {
	SandboxID string `json:"sandboxId"`
	// Envs are set for every kernel and process from now on.
	Envs map[string]string `json:"envs,omitempty"`
	// Unset names variables to remove (a fork's parent's lizardToken).
	Unset []string `json:"unset,omitempty"`
	// KeepSeeds leaves the random generators alone: a resumed sandbox is
	// the same sandbox, not a copy.
	KeepSeeds bool `json:"keepSeeds,omitempty"`
	// Secret, when set, replaces the agent's secret: a copy takes its own
	// (the request itself carries its source's).
	Secret string `json:"secret,omitempty"`
}

// HeaderAgentSpans is the trailer in which the agent reports what it
// timed on a call whose traceparent asks for the trace to be recorded
// (TraceSampled): a JSON array of AgentSpan. The agent runs inside the
// sandbox, whose network reaches no trace collector, so the node, which
// can export, records these as spans of the call (docs/traces.md)
// and removes the trailer.
const HeaderAgentSpans = "Lizard-Agent-Spans"

// AgentSpan is one step the agent timed on a call. Times are offsets from
// when the agent received the call, not clock readings: a restored
// sandbox's clock need not agree with its node's.
type AgentSpan struct {
	Name    string `json:"name"`
	StartUs int64  `json:"startUs"` // microseconds after the call was received
	DurUs   int64  `json:"durUs"`
	// Error, when set, says the step failed and why.
	Error string `json:"error,omitempty"`
}

// TraceSampled reports whether traceparent, a W3C trace-context header
// ("00-<trace id>-<span id>-<flags>"), asks for its trace to be recorded.
func TraceSampled(traceparent string) bool {
	parts := strings.Split(traceparent, "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return false
	}
	flags, err := strconv.ParseUint(parts[3], 16, 8)
	return err == nil && flags&1 == 1 && parts[1] != strings.Repeat("0", 32)
}
