package chunkcopy

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"
)

// writes records the size of each write.
type writes struct {
	bytes.Buffer
	sizes []int
}

func (w *writes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

func TestCopy(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 25) // 250 bytes
	cut := errors.New("cut")
	for _, tc := range []struct {
		name  string
		src   io.Reader
		sizes []int
		err   error
	}{
		{"one byte a read, whole chunks", iotest.OneByteReader(bytes.NewReader(data)), []int{100, 100, 50}, nil},
		{"the data with its EOF", iotest.DataErrReader(bytes.NewReader(data)), []int{100, 100, 50}, nil},
		{"a sender that broke off", io.MultiReader(bytes.NewReader(data[:130]), iotest.ErrReader(io.ErrUnexpectedEOF)), []int{100, 30}, io.ErrUnexpectedEOF},
		{"another read error", io.MultiReader(bytes.NewReader(data[:100]), iotest.ErrReader(cut)), []int{100}, cut},
		{"nothing", bytes.NewReader(nil), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w writes
			n, err := Copy(&w, tc.src, make([]byte, 100))
			if !errors.Is(err, tc.err) {
				t.Errorf("err = %v; want %v", err, tc.err)
			}
			if !slices.Equal(w.sizes, tc.sizes) || n != int64(w.Len()) {
				t.Errorf("writes %v (n %d, %d written); want %v", w.sizes, n, w.Len(), tc.sizes)
			}
			if !bytes.HasPrefix(data, w.Bytes()) {
				t.Error("the bytes written are not the source's")
			}
		})
	}
}
