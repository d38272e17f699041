// Package sparse writes files with holes: a template's heap (--share-heap)
// is ~142 MB of address space of which ~72 MB is not zero, and written
// whole each copy would take twice the disk and its page cache.
package sparse

import (
	"bytes"
	"errors"
	"io"
	"os"
)

// Block is the unit of a hole: a page.
const Block = 4096

var zero = make([]byte, Block)

// Copy copies r into f from offset 0, seeking over the all-zero blocks so
// that they take no space on disk, and sets f's size to what it read
// (holes at the end count too). It returns the bytes read.
func Copy(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, 256*Block)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		if err := writeRuns(f, buf[:n], off); err != nil {
			return off, err
		}
		off += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return off, err
		}
	}
	return off, f.Truncate(off)
}

// writeRuns writes b's runs of blocks that are not all zero at off, one
// write per run.
func writeRuns(f *os.File, b []byte, off int64) error {
	start := -1 // the run of non-zero blocks under way
	for i := 0; i < len(b); i += Block {
		blk := b[i:min(i+Block, len(b))]
		if !bytes.Equal(blk, zero[:len(blk)]) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			if _, err := f.WriteAt(b[start:i], off+int64(start)); err != nil {
				return err
			}
			start = -1
		}
	}
	if start >= 0 {
		if _, err := f.WriteAt(b[start:], off+int64(start)); err != nil {
			return err
		}
	}
	return nil
}
