package sparse

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCopy: the copy has the source's bytes and size, zero blocks in the
// middle and at the end included, and takes less disk than its size.
func TestCopy(t *testing.T) {
	for _, tt := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"all zero", make([]byte, 300*Block)},
		{"data, holes, a short tail", func() []byte {
			b := make([]byte, 600*Block+100)
			copy(b[3*Block:], "first")
			b[300*Block] = 1
			b[len(b)-1] = 0xff
			return b
		}()},
		{"holes at the end", func() []byte {
			b := make([]byte, 600*Block)
			copy(b, "head")
			return b
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "f"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n, err := Copy(f, bytes.NewReader(tt.data))
			if err != nil || n != int64(len(tt.data)) {
				t.Fatalf("Copy = %d, %v; want %d", n, err, len(tt.data))
			}
			got, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.data) {
				t.Fatalf("the copy differs from its source (%d bytes against %d)", len(got), len(tt.data))
			}
			var st syscall.Stat_t
			if err := syscall.Stat(f.Name(), &st); err != nil {
				t.Fatal(err)
			}
			if len(tt.data) > 100*Block && st.Blocks*512 >= int64(len(tt.data))/2 {
				t.Errorf("the copy takes %d bytes of disk for %d: its zero blocks were written", st.Blocks*512, len(tt.data))
			}

			// Its extents hold every byte that is not zero.
			ext, err := Extents(f, int64(len(tt.data)))
			if err != nil {
				t.Fatal(err)
			}
			in := make([]bool, len(tt.data))
			for _, e := range ext {
				for i := e.Off; i < e.Off+e.Len; i++ {
					in[i] = true
				}
			}
			for i, b := range tt.data {
				if b != 0 && !in[i] {
					t.Fatalf("byte %d (%#x) is in no extent of %v", i, b, ext)
				}
			}

			// A file copied from it is the same and as sparse.
			g, err := os.Create(filepath.Join(t.TempDir(), "g"))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if err := CopyFile(g, f, int64(len(tt.data))); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(g.Name()); err != nil || !bytes.Equal(got, tt.data) {
				t.Fatalf("CopyFile's copy differs from its source (%d bytes against %d, %v)", len(got), len(tt.data), err)
			}
			if err := syscall.Stat(g.Name(), &st); err != nil {
				t.Fatal(err)
			}
			if len(tt.data) > 100*Block && st.Blocks*512 >= int64(len(tt.data))/2 {
				t.Errorf("CopyFile's copy takes %d bytes of disk for %d: its zero blocks were written", st.Blocks*512, len(tt.data))
			}
		})
	}
}
