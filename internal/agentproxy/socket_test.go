package agentproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// scriptedConn returns its reads one by one, then fails.
type scriptedConn struct {
	reads [][]byte
	fail  error
}

func (c *scriptedConn) Read(p []byte) (int, error) {
	if len(c.reads) == 0 {
		return 0, c.fail
	}
	n := copy(p, c.reads[0])
	c.reads = c.reads[1:]
	return n, nil
}
func (c *scriptedConn) Write(p []byte) (int, error) { return 0, errors.New("closed") }
func (c *scriptedConn) Close() error                { return nil }

func TestClosingSocket(t *testing.T) {
	gone := &errdefs.Error{Kind: errdefs.ErrGone, Msg: "sandbox sb1 was killed"}
	binary := func(payload string) []byte { return append([]byte{0x82, byte(len(payload))}, payload...) }
	closeWith := func(reason string) []byte { return closeFrame(4410, reason) }
	tests := []struct {
		name     string
		reads    [][]byte
		stopped  bool
		wantTail []byte // what follows the agent's bytes
		eof      bool   // the connection ends with EOF rather than an error
	}{
		{"cut between frames", [][]byte{binary("ab"), binary("cd")}, true, closeWith(gone.Msg), false},
		{"cut inside a frame", [][]byte{binary("abcdef")[:4]}, true, append([]byte{0, 0, 0, 0}, closeWith(gone.Msg)...), false},
		{"header split across reads", [][]byte{{0x82}, {0x03, 'x'}}, true, append([]byte{0, 0}, closeWith(gone.Msg)...), false},
		{"agent closed first", [][]byte{closeFrame(1000, "exited")}, true, nil, false},
		{"connection ended cleanly by a dying sandbox", [][]byte{binary("ab")}, true, closeWith(gone.Msg), true},
		{"sandbox still running", [][]byte{binary("ab")}, false, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			if tt.stopped {
				cancel(gone)
			} else {
				defer cancel(nil)
			}
			var agent []byte
			for _, r := range tt.reads {
				agent = append(agent, r...)
			}
			fail := errors.New("connection reset")
			if tt.eof {
				fail = io.EOF
			}
			s := &closingSocket{ReadWriteCloser: &scriptedConn{reads: tt.reads, fail: fail}, ctx: ctx}
			if !tt.stopped {
				// Ended without a sandbox's end as the cause (the client
				// left): the error passes through, without waiting.
				cctx, ccancel := context.WithCancel(context.Background())
				ccancel()
				s.ctx = cctx
			}
			got, err := io.ReadAll(s)
			want := append(agent, tt.wantTail...)
			if tt.wantTail == nil {
				if err == nil {
					t.Errorf("no error after %q; want the connection's error passed on", got)
				}
			} else if err != nil {
				t.Errorf("error %v; want the close frame and EOF", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("client got %x, want %x", got, want)
			}
		})
	}
	if f := closeFrame(4410, string(bytes.Repeat([]byte("é"), 100))); len(f) > 127 || f[1] != byte(len(f)-2) {
		t.Errorf("a long reason makes a frame of %d bytes (length byte %d); want at most 127 with a true length", len(f), f[1])
	}
}
