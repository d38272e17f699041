// Command egress measures the node's egress proxy (internal/egress) on
// loopback, beside the same work done directly in the same run: an HTTPS
// request on a new connection (TLS handshake, GET, answer) through the
// proxy and without it, and bytes per second carried through it and
// without it. make bench runs it (bench/bench.py, egress_figures) and
// prints the figures as JSON on stdout.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/netpolicy"
)

type result struct {
	DirectMs   []float64 `json:"directMs"`
	ProxyMs    []float64 `json:"proxyMs"`
	DirectMBps float64   `json:"directMBps"`
	ProxyMBps  float64   `json:"proxyMBps"`
	Bytes      int64     `json:"bytes"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "egress bench:", err)
		os.Exit(1)
	}
}

func run() error {
	requests := flag.Int("requests", 200, "HTTPS requests each way")
	mib := flag.Int64("mib", 2048, "MiB carried each way for the throughput figure")
	flag.Parse()

	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	sink, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	upPort, sinkPort := port(up.Listener.Addr()), port(sink.Addr())

	// This process is the "sandbox" (127.0.0.1); the original destination a
	// redirect keeps is the port it dialled, given here by OrigDst.
	table := &egress.Table{}
	pol, err := netpolicy.Parse(netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{"example.com", "sink.test"}, Ports: []int{upPort, sinkPort}}, "network")
	if err != nil {
		return err
	}
	table.Set(netip.MustParseAddr("127.0.0.1"), egress.Sandbox{ID: "bench", Project: "bench", Policy: pol})
	res := &egress.Resolver{Table: table, Logger: slog.New(slog.DiscardHandler),
		Records: map[string][]netip.Addr{"example.com": {netip.MustParseAddr("127.0.0.1")}, "sink.test": {netip.MustParseAddr("127.0.0.1")}}}
	dst := make(chan int, 1)
	proxy := &egress.Proxy{Table: table, Resolver: res, Logger: slog.New(slog.DiscardHandler),
		Reachable: func(netip.Addr) bool { return true },
		OrigDst: func(c net.Conn) (netip.AddrPort, error) {
			return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(<-dst)), nil
		}}
	if err := proxy.Start("127.0.0.1:0"); err != nil {
		return err
	}
	defer proxy.Close()
	proxyAddr := "127.0.0.1:" + strconv.Itoa(proxy.Port())

	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	client := func(via bool) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: "example.com"},
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var d net.Dialer
				if via {
					dst <- upPort
					return d.DialContext(ctx, "tcp4", proxyAddr)
				}
				return d.DialContext(ctx, "tcp4", up.Listener.Addr().String())
			},
		}}
	}
	var out result
	direct, viaProxy := client(false), client(true)
	for i := 0; i < *requests+10; i++ { // interleaved, so that load hits both alike; 10 warm-ups
		d, err := timeGet(direct)
		if err != nil {
			return fmt.Errorf("direct request: %w", err)
		}
		p, err := timeGet(viaProxy)
		if err != nil {
			return fmt.Errorf("request through the proxy: %w", err)
		}
		if i >= 10 {
			out.DirectMs, out.ProxyMs = append(out.DirectMs, d), append(out.ProxyMs, p)
		}
	}

	out.Bytes = *mib << 20
	if out.DirectMBps, err = throughput(sink.Addr().String(), out.Bytes, nil); err != nil {
		return err
	}
	if out.ProxyMBps, err = throughput(proxyAddr, out.Bytes, func() { dst <- sinkPort }); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func timeGet(c *http.Client) (float64, error) {
	start := time.Now()
	resp, err := c.Get("https://example.com/")
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "ok" {
		return 0, fmt.Errorf("answer %q: %v", b, err)
	}
	return float64(time.Since(start).Microseconds()) / 1000, nil
}

// throughput sends an HTTP request head and n bytes to addr and returns
// MB/s (10^6 bytes) until the far end has read them all.
func throughput(addr string, n int64, before func()) (float64, error) {
	if before != nil {
		before()
	}
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: sink.test\r\nContent-Length: %d\r\n\r\n", n)
	buf := make([]byte, 1<<20)
	for sent := int64(0); sent < n; sent += int64(len(buf)) {
		if _, err := c.Write(buf); err != nil {
			return 0, fmt.Errorf("sending to %s: %w", addr, err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c) // the far end closes once it has read everything
	return float64(n) / time.Since(start).Seconds() / 1e6, nil
}

func port(a net.Addr) int { return a.(*net.TCPAddr).Port }
