package agentproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// TestUnreadBodyClosesTheConnection: a call answered before its request's
// body was read (the sandbox's node did not answer, so the body was never
// sent) says Connection: close. In full duplex the server closes such a
// connection without saying so, and the client's next request on it, a
// create or a call of another sandbox, failed without a status ("server
// closed idle connection": bench/fleet's lost nodes, 964 such calls). A
// call without a body keeps its connection.
func TestUnreadBodyClosesTheConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := url.Parse("http://" + ln.Addr().String())
	ln.Close() // nothing answers there
	p := &Proxy{
		Acquire: func(ctx context.Context, id string) (Call, error) {
			return Call{URL: dead, Ctx: ctx, Release: func() {}}, nil
		},
		Transport: http.DefaultTransport,
		Fail: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		},
		Unanswered: func(context.Context, string) error { return io.ErrUnexpectedEOF },
		Log:        slog.New(slog.DiscardHandler),
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/sandboxes/{id}/", p)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		method string
		body   io.Reader
		close  bool
	}{
		{http.MethodPost, strings.NewReader(`{"code":"1+1"}`), true},
		{http.MethodGet, nil, false},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+"/v1/sandboxes/sb1/execute", tc.body)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Close != tc.close {
			t.Errorf("%s to a node not answering: %d, Connection: close %v; want 503, %v", tc.method, resp.StatusCode, resp.Close, tc.close)
		}
	}
}

// chunkSink is an agent that reads an upload's chunked body by hand and
// reports each chunk's size and the bytes, or that the body never ended
// (its sender broke off).
func chunkSink(t *testing.T) (*url.URL, <-chan []int, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	sizes, data := make(chan []int, 1), make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for { // the request's head
			line, err := br.ReadString('\n')
			if err != nil {
				sizes <- nil
				return
			}
			if line == "\r\n" {
				break
			}
		}
		var got []int
		var body []byte
		for {
			line, err := br.ReadString('\n')
			var n int
			if err == nil {
				_, err = fmt.Sscanf(line, "%x", &n)
			}
			if err != nil {
				sizes <- nil // no last chunk: the body was cut
				return
			}
			if n == 0 {
				break
			}
			got = append(got, n)
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(br, buf); err != nil {
				sizes <- nil
				return
			}
			body = append(body, buf[:n]...)
		}
		sizes <- got
		data <- body
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	}()
	u, _ := url.Parse("http://" + ln.Addr().String())
	return u, sizes, data
}

func uploadProxy(agent *url.URL) *httptest.Server {
	p := &Proxy{
		Acquire: func(ctx context.Context, id string) (Call, error) {
			return Call{URL: agent, Ctx: ctx, Release: func() {}}, nil
		},
		Transport: http.DefaultTransport,
		MaxUpload: 1 << 30,
		TooLarge:  errors.New("too large"),
		Fail: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		},
		Unanswered: func(context.Context, string) error { return io.ErrUnexpectedEOF },
		Log:        slog.New(slog.DiscardHandler),
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/sandboxes/{id}/", p)
	return httptest.NewServer(mux)
}

// TestUploadOfUnknownLengthInLargeChunks: a streamed (chunked) upload,
// sent in 32 KiB pieces, reaches the agent byte-exact in uploadChunk
// chunks, the last one shorter. Passed on as read, every 32 KiB piece was
// a chunk of its own: three writes and an agent read each, which cost the
// sandbox's runsc 3-4x the CPU of the same bytes with a Content-Length.
func TestUploadOfUnknownLengthInLargeChunks(t *testing.T) {
	agent, sizes, data := chunkSink(t)
	srv := uploadProxy(agent)
	defer srv.Close()
	want := make([]byte, 3*uploadChunk+uploadChunk/2)
	rand.Read(want)
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/sandboxes/sb1/files?path=f", struct{ io.Reader }{bytes.NewReader(want)})
	req.ContentLength = -1 // chunked, as the SDKs send an iterator
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	got := <-sizes
	if wantSizes := []int{uploadChunk, uploadChunk, uploadChunk, uploadChunk / 2}; !slices.Equal(got, wantSizes) {
		t.Errorf("chunks the agent got: %d of sizes %v; want %v", len(got), got[:min(len(got), 5)], wantSizes)
	}
	if !bytes.Equal(<-data, want) {
		t.Error("the agent got other bytes than those sent")
	}
}

// TestCutUploadNeverEnds: a client that breaks off a chunked upload in its
// middle never makes the agent's body end — it would rename a cut file
// into place — however much of a chunk the proxy had gathered.
func TestCutUploadNeverEnds(t *testing.T) {
	agent, sizes, _ := chunkSink(t)
	srv := uploadProxy(agent)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "PUT /v1/sandboxes/sb1/files?path=f HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	part := bytes.Repeat([]byte("x"), 100_000)
	fmt.Fprintf(c, "%x\r\n%s\r\n%x\r\n%s", len(part), part, len(part), part[:50_000]) // cut inside a chunk
	c.(*net.TCPConn).CloseWrite()
	defer c.Close()
	if got := <-sizes; got != nil {
		t.Errorf("a cut upload reached the agent as a whole body of chunks %v", got)
	}
}

// TestGatheredEndsOnlyAtEOF: gathered ends a body as whole only at io.EOF;
// a sender's break (io.ErrUnexpectedEOF from the chunked reader) or the
// upload's bound fails the copy after what was read went on.
func TestGatheredEndsOnlyAtEOF(t *testing.T) {
	for _, end := range []error{io.EOF, io.ErrUnexpectedEOF, errors.New("file upload past its bound")} {
		src := io.MultiReader(bytes.NewReader(make([]byte, uploadChunk+10)), iotest.ErrReader(end))
		var dst bytes.Buffer
		n, err := gathered{io.NopCloser(src)}.WriteTo(&dst)
		want := end
		if end == io.EOF {
			want = nil
		}
		if n != uploadChunk+10 || dst.Len() != uploadChunk+10 || !errors.Is(err, want) && err != want {
			t.Errorf("body ending in %v: %d bytes, %v; want %d, %v", end, n, err, uploadChunk+10, want)
		}
	}
}

// TestGatheringBounded: with maxGathering uploads gathering already, one
// more is passed on as it is read, byte-exact, holding no chunk of its own.
func TestGatheringBounded(t *testing.T) {
	for range maxGathering {
		gathering <- struct{}{}
	}
	defer func() {
		for range maxGathering {
			<-gathering
		}
	}()
	agent, sizes, data := chunkSink(t)
	srv := uploadProxy(agent)
	defer srv.Close()
	want := make([]byte, 2*uploadChunk)
	rand.Read(want)
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/sandboxes/sb1/files?path=f", struct{ io.Reader }{bytes.NewReader(want)})
	req.ContentLength = -1
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := <-sizes; resp.StatusCode != http.StatusOK || len(got) == 0 || slices.Max(got) >= uploadChunk {
		t.Errorf("an upload past maxGathering: %d, chunks %v; want 200 and chunks as read", resp.StatusCode, got[:min(len(got), 5)])
	}
	if !bytes.Equal(<-data, want) {
		t.Error("the agent got other bytes than those sent")
	}
}
