package envd

import (
	"reflect"
	"testing"

	"github.com/lizard-build/lizard/api"
)

func TestUploadEvents(t *testing.T) {
	ev := func(typ, name string) api.FileEvent { return api.FileEvent{Type: typ, Name: name} }
	tests := []struct {
		name string
		in   []api.FileEvent
		want []api.FileEvent
	}{
		{"an upload is the file's create and write",
			[]api.FileEvent{ev(api.FileCreate, ".lizard-upload-1"), ev(api.FileWrite, ".lizard-upload-1"), ev(api.FileChmod, ".lizard-upload-1"), ev(api.FileRename, ".lizard-upload-1"), ev(api.FileCreate, "a.txt")},
			[]api.FileEvent{ev(api.FileCreate, "a.txt"), ev(api.FileWrite, "a.txt")}},
		{"in a subdirectory of a recursive watch",
			[]api.FileEvent{ev(api.FileRename, "sub/.lizard-upload-9"), ev(api.FileCreate, "sub/b")},
			[]api.FileEvent{ev(api.FileCreate, "sub/b"), ev(api.FileWrite, "sub/b")}},
		{"other events pass as they are",
			[]api.FileEvent{ev(api.FileCreate, "c"), ev(api.FileWrite, "c"), ev(api.FileRename, "c"), ev(api.FileCreate, "d"), ev(api.FileRemove, "d")},
			[]api.FileEvent{ev(api.FileCreate, "c"), ev(api.FileWrite, "c"), ev(api.FileRename, "c"), ev(api.FileCreate, "d"), ev(api.FileRemove, "d")}},
		{"an abandoned upload's temporary file leaves nothing",
			[]api.FileEvent{ev(api.FileCreate, ".lizard-upload-2"), ev(api.FileRemove, ".lizard-upload-2"), ev(api.FileCreate, "e")},
			[]api.FileEvent{ev(api.FileCreate, "e")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u uploads
			var got []api.FileEvent
			for _, e := range tt.in {
				got = append(got, u.events(e)...)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events %v; want %v", got, tt.want)
			}
		})
	}
}
