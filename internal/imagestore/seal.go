package imagestore

// Sealing (docs/storage.md#sealing). Whoever can write the bucket can
// write an object and a manifest that matches it, and an image is the
// sandbox's memory, its files and the agent's secret, which runsc restores
// as its Sentry's state: an image is encrypted and authenticated with a
// key the bucket does not hold, and nothing of it is used before it
// opened.
//
// The object is a stream of chunks, each ChunkSize bytes of the tar
// sealed with AES-256-GCM (the STREAM construction): the key is derived
// from the store's key and the image's random ID, so no two images share
// one and a nonce is never used twice; the nonce is the chunk's index and
// a flag set on the last chunk only, so a reordered, dropped or appended
// chunk does not open, nor does a stream cut at a chunk's end; the
// additional data binds the image's name, so a chunk or an object copied
// from another image does not open under this one. The manifest is
// authenticated with HMAC-SHA256 over its bytes and the image's name, so
// a manifest copied from another image, or rewritten, is refused.

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// ChunkSize is the bytes of the tar each sealed chunk holds; a chunk in
// the object is Overhead bytes more.
const (
	ChunkSize = 1 << 20
	Overhead  = 16 // the GCM tag
)

// format names the sealed layout in the manifest's envelope; a manifest
// without it is of an image made before images were sealed.
const format = "lizard-image-sealed-v1"

// Key seals and opens images: an encryption key and a MAC key derived
// from one secret the bucket does not hold.
type Key struct {
	id  string
	enc []byte
	mac []byte
}

// NewKey returns the key of secret, 32 bytes or more of a key the
// bucket does not hold (the operator's secrets key's Derive("image
// store")).
func NewKey(secret []byte) (*Key, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("an image key needs 32 bytes of secret, got %d", len(secret))
	}
	derive := func(info string) []byte {
		b, err := hkdf.Key(sha256.New, secret, nil, info, 32)
		if err != nil {
			panic(err)
		}
		return b
	}
	id := sha256.Sum256(append([]byte("lizard image key id\x00"), secret...))
	return &Key{id: hex.EncodeToString(id[:8]), enc: derive("lizard image encryption"), mac: derive("lizard image manifest mac")}, nil
}

// ID names the key without revealing it (a manifest records the key its
// image was sealed with, so that a node given another key says so).
func (k *Key) ID() string { return k.id }

var (
	// ErrTampered: an image does not open with this node's key — its
	// manifest's MAC or one of its chunks fails, or its object is cut
	// short or has more. Whoever can write the bucket may have altered
	// it; nothing of it is used.
	ErrTampered = errors.New("image in the image store failed its authentication")
	// ErrUnsealed: an image stored before images were sealed, which
	// nothing authenticates (docs/storage.md says how to move them).
	ErrUnsealed = fmt.Errorf("%w: it was stored unsealed, by a Lizard from before images were sealed", ErrTampered)
	// ErrWrongKey: an image sealed with another key than this node's.
	ErrWrongKey = fmt.Errorf("%w: it was sealed with another key", ErrTampered)
)

// Reason names err's kind of authentication failure for the metric
// (tampered, unsealed, wrong_key); "" if err is none.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrUnsealed):
		return "unsealed"
	case errors.Is(err, ErrWrongKey):
		return "wrong_key"
	case errors.Is(err, ErrTampered):
		return "tampered"
	}
	return ""
}

// envelope is manifest.json: the manifest's bytes as written, and their
// MAC. The bytes are kept raw so that the MAC is checked over exactly
// what was written, never over a re-encoding.
type envelope struct {
	Format   string `json:"format"`
	KeyID    string `json:"keyId"`
	Manifest []byte `json:"manifest"` // JSON of a Manifest
	MAC      string `json:"mac"`      // hex HMAC-SHA256, manifestMAC
}

// manifestMAC binds body to image name.
func (k *Key) manifestMAC(name string, body []byte) []byte {
	h := hmac.New(sha256.New, k.mac)
	h.Write([]byte("lizard image manifest\x00"))
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// stream returns the AEAD of the image name whose random ID is id.
func (k *Key) stream(name string, id []byte) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, k.enc, id, "lizard image chunks\x00"+name, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// nonce is chunk i's: its index, and whether it is the last.
func nonce(dst []byte, i uint64, last bool) []byte {
	dst = dst[:12]
	clear(dst)
	binary.BigEndian.PutUint64(dst[3:11], i)
	if last {
		dst[11] = 1
	}
	return dst
}

// chunkAD is chunk i of image name's additional data.
func chunkAD(dst []byte, name string, i uint64) []byte {
	dst = append(dst[:0], "lizard image\x00"...)
	dst = append(dst, name...)
	dst = append(dst, 0)
	return binary.BigEndian.AppendUint64(dst, i)
}

// sealer writes the sealed chunks of what is written to it to w; Close
// seals the last.
type sealer struct {
	w     io.Writer
	aead  cipher.AEAD
	name  string
	buf   []byte // the chunk being filled
	out   []byte
	nonce [12]byte
	ad    []byte
	i     uint64
	n     int64 // sealed bytes written
}

func newSealer(w io.Writer, aead cipher.AEAD, name string) *sealer {
	return &sealer{w: w, aead: aead, name: name, buf: make([]byte, 0, ChunkSize), out: make([]byte, 0, ChunkSize+Overhead)}
}

func (s *sealer) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		// A full chunk is sealed only once more bytes come: until
		// then it may be the last.
		if len(s.buf) == ChunkSize {
			if err := s.flush(false); err != nil {
				return written, err
			}
		}
		n := copy(s.buf[len(s.buf):ChunkSize], p)
		s.buf = s.buf[:len(s.buf)+n]
		p = p[n:]
		written += n
	}
	return written, nil
}

func (s *sealer) flush(last bool) error {
	s.ad = chunkAD(s.ad, s.name, s.i)
	s.out = s.aead.Seal(s.out[:0], nonce(s.nonce[:], s.i, last), s.buf, s.ad)
	n, err := s.w.Write(s.out)
	s.n += int64(n)
	s.buf = s.buf[:0]
	s.i++
	return err
}

// Close seals the last chunk (empty if the stream ended at a chunk's
// end: the last chunk is always there, marked).
func (s *sealer) Close() error { return s.flush(true) }

// opener reads the tar out of a sealed object, a chunk at a time, giving
// out no byte of a chunk that did not open; its last chunk must be marked
// so. Failures of authentication are ErrTampered; the reader's own
// (network, disk) are returned as they are.
type opener struct {
	r     *bufio.Reader
	aead  cipher.AEAD
	name  string
	in    []byte
	plain []byte // what is left of the opened chunk
	nonce [12]byte
	ad    []byte
	i     uint64
	done  bool  // the last chunk opened
	err   error // sticky
}

func newOpener(r io.Reader, aead cipher.AEAD, name string) *opener {
	return &opener{r: bufio.NewReaderSize(r, 64<<10), aead: aead, name: name, in: make([]byte, ChunkSize+Overhead)}
}

func (o *opener) Read(p []byte) (int, error) {
	for len(o.plain) == 0 {
		if o.err != nil {
			return 0, o.err
		}
		if o.done {
			return 0, io.EOF
		}
		o.err = o.next()
	}
	n := copy(p, o.plain)
	o.plain = o.plain[n:]
	return n, nil
}

// next opens the next chunk.
func (o *opener) next() error {
	n, err := io.ReadFull(o.r, o.in)
	last := false
	switch {
	case err == nil:
		// A full chunk is the last if nothing follows it.
		if _, perr := o.r.Peek(1); perr == io.EOF {
			last = true
		} else if perr != nil {
			return perr
		}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		last = true
	default:
		return err
	}
	if n < Overhead {
		return fmt.Errorf("%w: its object ends at chunk %d before the last chunk", ErrTampered, o.i)
	}
	o.ad = chunkAD(o.ad, o.name, o.i)
	plain, err := o.aead.Open(o.in[:0], nonce(o.nonce[:], o.i, last), o.in[:n], o.ad)
	if err != nil {
		if last {
			return fmt.Errorf("%w: chunk %d (the object's end) does not open: altered, or the object cut short or lengthened", ErrTampered, o.i)
		}
		return fmt.Errorf("%w: chunk %d does not open", ErrTampered, o.i)
	}
	o.plain, o.done = plain, last
	o.i++
	return nil
}
