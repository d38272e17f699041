// Package sparse writes files with holes: a template's heap (--share-heap)
// is ~142 MB of address space of which ~72 MB is not zero, and written
// whole each copy would take twice the disk and its page cache.
package sparse

import (
	"bytes"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
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

// Extent is a run of a file's data.
type Extent struct{ Off, Len int64 }

// Extents are f's runs of data in its first size bytes, by SEEK_DATA and
// SEEK_HOLE: the whole of it, one extent, on a filesystem without holes.
func Extents(f *os.File, size int64) ([]Extent, error) {
	var out []Extent
	for off := int64(0); off < size; {
		start, err := f.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // holes to the end
		}
		if err != nil {
			return nil, err
		}
		end, err := f.Seek(start, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		end = min(end, size)
		out = append(out, Extent{start, end - start})
		off = end
	}
	return out, nil
}

// CopyFile copies the first size bytes of src to dst (both from offset
// 0), reading only src's data (Extents) and writing only its blocks that
// are not all zero, and sets dst's size to size.
func CopyFile(dst, src *os.File, size int64) error {
	if err := dst.Truncate(size); err != nil {
		return err
	}
	ext, err := Extents(src, size)
	if err != nil {
		return err
	}
	buf := make([]byte, 256*Block)
	for _, e := range ext {
		for p, end := e.Off, e.Off+e.Len; p < end; {
			n, err := src.ReadAt(buf[:min(int64(len(buf)), end-p)], p)
			if n == 0 && err != nil {
				return err
			}
			if err := writeRuns(dst, buf[:n], p); err != nil {
				return err
			}
			p += int64(n)
		}
	}
	return nil
}
