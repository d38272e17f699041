// Command images serves the bench's image for the template rows of make
// bench (bench/bench.py, image_section): an OCI image of about 200 MB cut
// from the interpreter template's root filesystem on this machine (its
// /usr/bin and /usr/lib/x86_64-linux-gnu, so commands run in it, and no
// Python kernel), pushed to go-containerregistry's registry on loopback.
// The image is pushed to --repos repositories (bench/image-0, -1, ...):
// Lizard caches layers per repository, so each is a cold pull. It prints
// {"registry", "refs", "digest", "bytes", "compressedBytes", "layers"} as
// one JSON line on stdout and serves until its stdin closes.
// Nothing is fetched from the internet: the e2e tests build their images
// the same way (e2e/images_test.go).
package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type result struct {
	Registry        string   `json:"registry"`
	Refs            []string `json:"refs"`
	Digest          string   `json:"digest"`
	Bytes           int64    `json:"bytes"`
	CompressedBytes int64    `json:"compressedBytes"`
	Layers          int      `json:"layers"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "images bench:", err)
		os.Exit(1)
	}
}

func run() error {
	rootfs := flag.String("rootfs", "", "the interpreter template's root filesystem the layers are cut from")
	repos := flag.Int("repos", 1, "repositories the image is pushed to")
	flag.Parse()
	if *rootfs == "" {
		return fmt.Errorf("give --rootfs")
	}
	tmp, err := os.MkdirTemp("", "lizard-bench-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	// Three layers as an image has them: a small base (the top-level links,
	// /etc/passwd), the programs, the libraries.
	base := filepath.Join(tmp, "base")
	for _, d := range []string{"etc", "usr/lib"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			return err
		}
	}
	for n, l := range map[string]string{"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/bin"} {
		if err := os.Symlink(l, filepath.Join(base, n)); err != nil {
			return err
		}
	}
	os.WriteFile(filepath.Join(base, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n"), 0o644)
	os.WriteFile(filepath.Join(base, "etc/group"), []byte("root:x:0:\nuser:x:1000:\n"), 0o644)
	parts := []struct {
		root string
		dirs []string
	}{
		{base, []string{"."}},
		{*rootfs, []string{"usr/bin", "usr/lib64"}},
		{*rootfs, []string{"usr/lib/x86_64-linux-gnu"}},
	}
	img := empty.Image
	var total, compressed int64
	for i, p := range parts {
		path := filepath.Join(tmp, fmt.Sprintf("layer%d.tar.gz", i))
		n, err := writeLayer(path, p.root, p.dirs)
		if err != nil {
			return err
		}
		l, err := tarball.LayerFromFile(path)
		if err != nil {
			return err
		}
		size, _ := l.Size()
		total, compressed = total+n, compressed+size
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return err
		}
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Env: []string{"PATH=/usr/bin:/bin"}, WorkingDir: "/home/user", User: "user"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(ln, registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	reg := ln.Addr().String()
	var refs []string
	for i := range *repos {
		ref, err := name.ParseReference(fmt.Sprintf("%s/bench/image-%d:1", reg, i))
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img); err != nil {
			return fmt.Errorf("pushing the image: %w", err)
		}
		refs = append(refs, ref.String())
	}
	d, _ := img.Digest()
	json.NewEncoder(os.Stdout).Encode(result{Registry: reg, Refs: refs, Digest: d.String(), Bytes: total, CompressedBytes: compressed, Layers: len(parts)})
	io.Copy(io.Discard, os.Stdin) // serve until the bench closes our stdin (or ends)
	return nil
}

// writeLayer writes the trees dirs of root (files, directories, symbolic
// links; owned by root) to path as a gzipped tar at the same paths, and
// returns the bytes of the files.
func writeLayer(path, root string, dirs []string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed) // the pull decompresses at the same speed at any level
	tw := tar.NewWriter(zw)
	var total int64
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if rel == "." {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if d.Type() == os.ModeSymlink {
				link, _ = os.Readlink(p)
			} else if !d.IsDir() && !d.Type().IsRegular() {
				return nil // no devices, sockets or pipes
			}
			h, err := tar.FileInfoHeader(fi, link)
			if err != nil {
				return err
			}
			h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.Format = rel, 0, 0, "", "", tar.FormatPAX
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			n, err := io.Copy(tw, src)
			total += n
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	return total, f.Close()
}
