package egress

import (
	"fmt"
	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/lizard-build/lizard/internal/fdbudget"
)

// LogSize bounds each sandbox's decision log: the newest are kept.
const LogSize = 1000

// MaxConns bounds each sandbox's connections through the proxy at once.
// Each holds one of the node's file descriptors (two once joined to its
// upstream), which the API's listener and every other sandbox share: a
// sandbox that opened connections and sent nothing took them all before,
// and the node accepted nothing more.
const MaxConns = 1024

// MaxLookups bounds each sandbox's DNS queries the resolver has forwarded
// upstream at once. Each holds one of the node's UDP sockets and a
// goroutine until the upstream answers or times out (seconds), and a
// sandbox sends queries over UDP as fast as it likes: past the bound a
// query is answered SERVFAIL at once.
const MaxLookups = 64

// Sandbox is what the resolver and the proxy know of a sandbox.
type Sandbox struct {
	ID      string
	Project string
	Policy  *netpolicy.Policy
}

// Decision is one egress decision, as counted and logged.
type Decision struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"` // KindDNS, KindHTTP, KindTLS
	Name    string    `json:"name,omitempty"`
	Addr    string    `json:"addr,omitempty"` // the address connected to (or answered)
	Port    int       `json:"port,omitempty"`
	Allowed bool      `json:"allowed"`
	Reason  string    `json:"reason,omitempty"` // why denied
	// BytesOut and BytesIn are what a connection carried, sandbox to
	// upstream and back, once it ended.
	BytesOut int64 `json:"bytesOut,omitempty"`
	BytesIn  int64 `json:"bytesIn,omitempty"`
}

// Kinds of decision.
const (
	KindDNS  = "dns"
	KindHTTP = "http"
	KindTLS  = "tls"
	// KindTCP is a connection refused before its first bytes were read
	// (the sandbox's or its project's bound met).
	KindTCP = "tcp"
)

// Table is the node's live view of sandboxes with a policy, keyed by the
// sandbox's address (what a packet reaching the resolver or the proxy
// says) and by ID. Its zero value is ready to use. A policy set here is
// the one the next connection meets: updates take effect at once.
type Table struct {
	// Budget, when set, counts what each project's sandboxes hold on the
	// node through the proxy and the resolver (package fdbudget): the
	// per-sandbox bounds alone let one project's sandboxes together take
	// every descriptor of the node.
	Budget *fdbudget.Budget

	mu     sync.Mutex
	byAddr map[netip.Addr]string
	boxes  map[string]*box
}

type box struct {
	Sandbox
	addr  netip.Addr
	log   []Decision // ring of LogSize
	next  int
	conns map[net.Conn]struct{}
	// lookups counts its queries forwarded upstream (MaxLookups).
	lookups int
	// warned is when its last line of the node's log was written, and
	// unwarned how many were dropped since (logLine).
	warned   time.Time
	unwarned int
	// full is set once the sandbox met MaxConns (told once in the log).
	full bool
}

// Set records sandbox sb at guest address addr (a create, restore or
// resume), keeping its log if it had one.
func (t *Table) Set(addr netip.Addr, sb Sandbox) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.boxes == nil {
		t.boxes, t.byAddr = map[string]*box{}, map[netip.Addr]string{}
	}
	b := t.boxes[sb.ID]
	if b == nil {
		b = &box{conns: map[net.Conn]struct{}{}}
		t.boxes[sb.ID] = b
	}
	if b.addr.IsValid() && t.byAddr[b.addr] == sb.ID {
		delete(t.byAddr, b.addr)
	}
	b.Sandbox, b.addr = sb, addr
	t.byAddr[addr] = sb.ID
}

// Unset forgets sandbox id's address (a pause), closing its open
// connections: its log stays. The address is released while it is paused
// and may be another sandbox's, and its frozen processes lose their
// connections on restore anyway.
func (t *Table) Unset(id string) {
	t.mu.Lock()
	b := t.boxes[id]
	var conns []net.Conn
	if b != nil {
		if t.byAddr[b.addr] == id {
			delete(t.byAddr, b.addr)
		}
		b.addr = netip.Addr{}
		conns = b.open()
	}
	t.mu.Unlock()
	closeAll(conns)
}

// Remove forgets sandbox id and its log (it ended), closing its open
// connections.
func (t *Table) Remove(id string) {
	t.mu.Lock()
	b := t.boxes[id]
	var conns []net.Conn
	if b != nil {
		if t.byAddr[b.addr] == id {
			delete(t.byAddr, b.addr)
		}
		delete(t.boxes, id)
		conns = b.open()
	}
	t.mu.Unlock()
	closeAll(conns)
}

// open lists b's connections; the caller holds the table's lock, and
// closes them after releasing it (a close can block, and an untrack takes
// the lock).
func (b *box) open() []net.Conn {
	conns := make([]net.Conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	return conns
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// ByAddr returns the sandbox at guest address a.
func (t *Table) ByAddr(a netip.Addr) (Sandbox, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.boxes[t.byAddr[a.Unmap()]]; b != nil && b.addr.IsValid() {
		return b.Sandbox, true
	}
	return Sandbox{}, false
}

// Update replaces sandbox id's policy; with cut, the connections it has
// open through the proxy are closed.
func (t *Table) Update(id string, p *netpolicy.Policy, cut bool) {
	t.mu.Lock()
	b := t.boxes[id]
	var conns []net.Conn
	if b != nil {
		b.Policy = p
		if cut {
			conns = b.open()
		}
	}
	t.mu.Unlock()
	closeAll(conns)
}

// Record appends d to sandbox id's log.
func (t *Table) Record(id string, d Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.boxes[id]
	if b == nil {
		return
	}
	if len(b.log) < LogSize {
		b.log = append(b.log, d)
		return
	}
	b.log[b.next] = d
	b.next = (b.next + 1) % LogSize
}

// Log returns sandbox id's decisions, oldest first.
func (t *Table) Log(id string) []Decision {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.boxes[id]
	if b == nil {
		return nil
	}
	out := make([]Decision, 0, len(b.log))
	out = append(out, b.log[b.next:]...)
	return append(out, b.log[:b.next]...)
}

// track records c, a hold of kind k, as open for sandbox id (closed by a cut, Unset or
// Remove); the function returned forgets it. When the sandbox is gone or
// paused since c's address was looked up, c is closed and ok is false.
// When the sandbox has MaxConns open, or its project its budget of the
// node's descriptors, c is reset (the code in the sandbox sees
// ECONNRESET at once rather than a connection that hangs), ok is false
// and refused says why; full is set the first time the sandbox met
// MaxConns.
func (t *Table) track(id string, c net.Conn, k fdbudget.Kind) (untrack func(), ok, full bool, refused error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.boxes[id]
	if b == nil || !b.addr.IsValid() {
		c.Close()
		return nil, false, false, nil
	}
	if len(b.conns) >= MaxConns {
		reset(c)
		full, b.full = !b.full, true
		return nil, false, full, fmt.Errorf("the sandbox has %d connections open through the proxy, its most", MaxConns)
	}
	release, err := t.Budget.Take(b.Project, k)
	if err != nil {
		reset(c)
		return nil, false, false, err
	}
	b.conns[c] = struct{}{}
	return func() {
		release()
		t.mu.Lock()
		delete(b.conns, c)
		t.mu.Unlock()
	}, true, false, nil
}

// reset closes c with a TCP reset: a refused connection must not look
// like one the upstream closed after accepting it.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// lookup counts one of sandbox id's queries forwarded upstream; the
// function returned ends it. ok is false when the sandbox is gone or has
// MaxLookups under way, or its project its budget of descriptors.
func (t *Table) lookup(id string) (done func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.boxes[id]
	if b == nil || b.lookups >= MaxLookups {
		return nil, false
	}
	release, err := t.Budget.Take(b.Project, fdbudget.Lookup)
	if err != nil {
		return nil, false
	}
	b.lookups++
	return func() {
		release()
		t.mu.Lock()
		b.lookups--
		t.mu.Unlock()
	}, true
}

// logLine reports whether sandbox id may write a line of the node's log
// at now, at most one a second, and how many it was refused since its
// last. Code in the sandbox makes the failures logged at its own rate,
// and the node's log is a file on the host outside every bound of the
// sandbox.
func (t *Table) logLine(id string, now time.Time) (dropped int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.boxes[id]
	if b == nil {
		return 0, false
	}
	if now.Sub(b.warned) < time.Second {
		b.unwarned++
		return 0, false
	}
	dropped, b.warned, b.unwarned = b.unwarned, now, 0
	return dropped, true
}

// LogAPI is a decision log as the API gives it.
func LogAPI(ds []Decision) api.NetworkLog {
	out := api.NetworkLog{Entries: make([]api.NetworkLogEntry, len(ds))}
	for i, d := range ds {
		out.Entries[i] = api.NetworkLogEntry(d)
	}
	return out
}
