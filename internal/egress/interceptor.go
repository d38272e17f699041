package egress

import (
	"context"
	"net"
)

// Interceptor takes over the connections whose name matches one of the
// sandbox's inject rules (package secrets terminates TLS there and sets
// the rule's headers). The proxy has checked the name against the policy
// and resolved it; the Interceptor owns Conn from then on and must close
// it.
type Interceptor interface {
	Intercept(ctx context.Context, c InterceptConn) error
}

// InterceptConn is one connection handed to an Interceptor.
type InterceptConn struct {
	SandboxID string
	Project   string
	// Conn is the sandbox's connection, with the bytes the proxy read to
	// find the name (the ClientHello, or the HTTP request head) replayed
	// first.
	Conn net.Conn
	Name string // the name checked, lower-case punycode
	Port int    // the port the sandbox connected to
	TLS  bool
	// Headers are the matched HeaderRule's: header name to template.
	Headers map[string]string
	// Dial connects to the address the proxy resolved for Name on Port
	// (never the address the sandbox asked for).
	Dial func(ctx context.Context) (net.Conn, error)
}
