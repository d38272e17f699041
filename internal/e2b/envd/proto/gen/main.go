// Command gen compiles envd's .proto files and runs protoc-gen-go and
// protoc-gen-connect-go on them (go generate in the directory above). It
// stands in for protoc or buf so that generating needs nothing but the Go
// module proxy: protocompile parses, and the two plugins run by go run at
// the versions go.mod pins.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/pluginpb"
)

// Files are the .proto files generated, relative to the proto directory.
var Files = []string{"process/process.proto", "filesystem/filesystem.proto"}

// Plugins are the code generators run, as go run arguments.
var Plugins = []string{
	"google.golang.org/protobuf/cmd/protoc-gen-go",
	"connectrpc.com/connect/cmd/protoc-gen-connect-go",
}

func main() {
	out := flag.String("out", ".", "where to write the generated files")
	flag.Parse()
	if err := run(context.Background(), ".", *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// run generates the Go code of dir's .proto files into out.
func run(ctx context.Context, dir, out string) error {
	files, err := Generate(ctx, dir)
	if err != nil {
		return err
	}
	for name, content := range files {
		p := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Generate compiles dir's .proto files and returns the generated files by
// path relative to dir.
func Generate(ctx context.Context, dir string) (map[string][]byte, error) {
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{dir}}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	compiled, err := c.Compile(ctx, Files...)
	if err != nil {
		return nil, fmt.Errorf("compiling: %w", err)
	}
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: Files, Parameter: proto.String("paths=source_relative")}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	// Plugins want every file after the files it imports.
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		for i := range f.Imports().Len() {
			add(f.Imports().Get(i).FileDescriptor)
		}
		req.ProtoFile = append(req.ProtoFile, protodesc.ToFileDescriptorProto(f))
	}
	for _, f := range compiled {
		add(f)
	}
	in, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, plugin := range Plugins {
		cmd := exec.CommandContext(ctx, "go", "run", plugin)
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader(in)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("running %s: %w: %s", plugin, err, stderr.Bytes())
		}
		var resp pluginpb.CodeGeneratorResponse
		if err := proto.Unmarshal(stdout.Bytes(), &resp); err != nil {
			return nil, fmt.Errorf("reading %s's answer: %w", plugin, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("%s: %s", plugin, resp.GetError())
		}
		for _, f := range resp.File {
			out[f.GetName()] = []byte(f.GetContent())
		}
	}
	return out, nil
}
