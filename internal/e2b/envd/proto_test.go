package envd

import (
	"os"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/process"
)

// TestProtoMatchesSDK compares the wire shape of our .proto files with the
// descriptors E2B's Python SDK (e2b 2.63.0) was generated from, kept in
// testdata/*.sdk.binpb as the SDK embeds them: package, services, methods
// and their streaming, messages, field names, numbers, types, labels,
// oneofs and enums must be the same, so a drift on either side fails here
// rather than on the wire.
func TestProtoMatchesSDK(t *testing.T) {
	for _, tc := range []struct {
		sdk  string
		ours protoreflect.FileDescriptor
	}{
		{"testdata/process.sdk.binpb", process.File_process_process_proto},
		{"testdata/filesystem.sdk.binpb", filesystem.File_filesystem_filesystem_proto},
	} {
		raw, err := os.ReadFile(tc.sdk)
		if err != nil {
			t.Fatal(err)
		}
		var sdk descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &sdk); err != nil {
			t.Fatalf("%s: %v", tc.sdk, err)
		}
		ours := protodesc.ToFileDescriptorProto(tc.ours)
		if want, got := wireShape(&sdk), wireShape(ours); !proto.Equal(want, got) {
			t.Errorf("%s differs from the SDK's:\nSDK:  %v\nours: %v", tc.ours.Path(), prototext.Format(want), prototext.Format(got))
		}
	}
}

// wireShape is f without what does not reach the wire: options, comments
// and source positions.
func wireShape(f *descriptorpb.FileDescriptorProto) *descriptorpb.FileDescriptorProto {
	f = proto.Clone(f).(*descriptorpb.FileDescriptorProto)
	f.Options, f.SourceCodeInfo = nil, nil
	var strip func(m *descriptorpb.DescriptorProto)
	strip = func(m *descriptorpb.DescriptorProto) {
		m.Options = nil
		for _, fd := range m.Field {
			fd.Options = nil
		}
		for _, n := range m.NestedType {
			if n.GetOptions().GetMapEntry() {
				n.Options = &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)}
				for _, fd := range n.Field {
					fd.Options = nil
				}
				continue
			}
			strip(n)
		}
	}
	for _, m := range f.MessageType {
		strip(m)
	}
	for _, s := range f.Service {
		s.Options = nil
		for _, m := range s.Method {
			m.Options = nil
		}
	}
	for _, e := range f.EnumType {
		e.Options = nil
	}
	return f
}
