// Package chunkcopy copies a stream in whole chunks: every write but the
// last fills the buffer. Where each write is a round trip — a system call
// into gVisor's Sentry, a chunk of HTTP into the sandbox's network stack —
// a stream that arrives in small pieces (a sender's chunks, TCP segments)
// would otherwise cost one per piece.
package chunkcopy

import (
	"errors"
	"io"
)

// Copy copies src to dst through buf, writing len(buf) bytes at a time
// (the last write shorter). Only io.EOF from src ends it cleanly: any other
// read error, io.ErrUnexpectedEOF of a sender that broke off included, is
// returned after what was read before it is written, so a caller can tell
// a cut stream from a whole one.
func Copy(dst io.Writer, src io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		filled := 0
		var rerr error
		for filled < len(buf) && rerr == nil {
			var m int
			m, rerr = src.Read(buf[filled:])
			filled += m
		}
		if filled > 0 {
			w, werr := dst.Write(buf[:filled])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
		}
		if errors.Is(rerr, io.EOF) {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}
