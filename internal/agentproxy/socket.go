package agentproxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"unicode/utf8"
)

// closingSocket is the agent side of a proxied WebSocket (a process's or
// terminal's, GET /processes/{pid}/ws). When the sandbox ends under it
// (killed, expired, failed), the client gets a WebSocket close frame with
// code 4000+status (4410) and the reason as its message, the socket form
// of the abort event that ends NDJSON streams, instead of a dropped
// connection. To put the frame where a frame may start, it follows the
// frame boundaries of what the agent sends; a frame the cut left unfinished
// is completed with zero bytes first.
type closingSocket struct {
	io.ReadWriteCloser
	ctx  context.Context
	tail *bytes.Reader

	hdr     []byte // the header of the frame being read, while incomplete
	left    uint64 // payload bytes of the current frame still to come
	sawEnd  bool   // a close frame went by: the agent closed the socket itself
	stopped bool   // the sandbox stopped: writes are dropped
}

// socketCloseBase is added to an HTTP status to make the close code.
const socketCloseBase = 4000

func (s *closingSocket) Read(p []byte) (int, error) {
	if s.tail != nil {
		return s.tail.Read(p)
	}
	n, err := s.ReadWriteCloser.Read(p)
	s.track(p[:n])
	// A clean end of the connection counts too: the agent always closes
	// a socket with a close frame, and a dying sandbox's network stack
	// may end the connection with a FIN before its end is known here.
	if err == nil || s.sawEnd {
		return n, err
	}
	cause := StopCause(s.ctx)
	if cause == nil {
		cause = waitStopCause(s.ctx, stopWait)
	}
	if cause == nil || (len(s.hdr) > 0) {
		return n, err
	}
	s.stopped = true
	status, _, msg := Classify(cause)
	var tail bytes.Buffer
	tail.Write(make([]byte, s.left))
	tail.Write(closeFrame(socketCloseBase+status, msg))
	s.left = 0
	s.tail = bytes.NewReader(tail.Bytes())
	return n, nil
}

// Write drops what the client sends once the sandbox has stopped, so that
// the proxy's copy towards the agent does not fail (and close the client's
// connection) before the close frame has reached the client.
func (s *closingSocket) Write(p []byte) (int, error) {
	if s.stopped || StopCause(s.ctx) != nil {
		return len(p), nil
	}
	return s.ReadWriteCloser.Write(p)
}

// track follows frame boundaries through p (RFC 6455 section 5.2).
func (s *closingSocket) track(p []byte) {
	for len(p) > 0 {
		if s.left > 0 {
			k := min(s.left, uint64(len(p)))
			s.left -= k
			p = p[k:]
			continue
		}
		s.hdr = append(s.hdr, p[0])
		p = p[1:]
		if need := frameHeaderLen(s.hdr); need > 0 && len(s.hdr) == need {
			s.left = framePayloadLen(s.hdr)
			if s.hdr[0]&0x0f == 0x8 {
				s.sawEnd = true
			}
			s.hdr = s.hdr[:0]
		}
	}
}

// frameHeaderLen is the length of the frame header that starts with hdr,
// or 0 while it cannot be told yet.
func frameHeaderLen(hdr []byte) int {
	if len(hdr) < 2 {
		return 0
	}
	n := 2
	switch hdr[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if hdr[1]&0x80 != 0 {
		n += 4 // masking key
	}
	return n
}

func framePayloadLen(hdr []byte) uint64 {
	switch l := hdr[1] & 0x7f; l {
	case 126:
		return uint64(binary.BigEndian.Uint16(hdr[2:4]))
	case 127:
		return binary.BigEndian.Uint64(hdr[2:10])
	default:
		return uint64(l)
	}
}

// closeFrame is an unmasked close frame (a server's) with code and as
// much of reason as a control frame holds (123 bytes), cut at a rune.
func closeFrame(code int, reason string) []byte {
	if len(reason) > 123 {
		cut := 123
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	f := []byte{0x88, byte(2 + len(reason)), byte(code >> 8), byte(code)}
	return append(f, reason...)
}
