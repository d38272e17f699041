package jupyter

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestWireRoundTrip(t *testing.T) {
	s := signer{key: []byte("secret")}
	id, frames, err := s.encode("session-1", "execute_request", map[string]string{"code": "1+1"})
	if err != nil {
		t.Fatal(err)
	}
	// The kernel prefixes routing identities (or an iopub topic) and sets
	// a parent header; decode skips the former and reads the latter.
	parent := []byte(`{"msg_id":"` + id + `"}`)
	in := [][]byte{[]byte("topic"), delimiter, nil, frames[2], parent, frames[4], frames[5]}
	in[2] = s.sign(in[3], in[4], in[5], in[6])
	m, err := s.decode(in)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if m.ParentID != id || m.Header.MsgType != "execute_request" || m.Header.Version != "5.3" || m.Header.Session != "session-1" {
		t.Errorf("decoded %+v, want parent %s, execute_request, 5.3, session-1", m, id)
	}
	var c map[string]string
	if err := json.Unmarshal(m.Content, &c); err != nil || c["code"] != "1+1" {
		t.Errorf("content = %s, want code 1+1", m.Content)
	}

	tampered := append([][]byte(nil), in...)
	tampered[6] = []byte(`{"code":"evil"}`)
	if _, err := s.decode(tampered); !errors.Is(err, errBadSignature) {
		t.Errorf("tampered content: err = %v, want errBadSignature", err)
	}
	if _, err := (signer{key: []byte("other")}).decode(in); !errors.Is(err, errBadSignature) {
		t.Errorf("wrong key: err = %v, want errBadSignature", err)
	}
	if _, err := s.decode(in[:4]); err == nil {
		t.Errorf("truncated message decoded without error")
	}
}

func TestPickMime(t *testing.T) {
	tests := []struct {
		name     string
		data     string
		wantMime string
		wantData string
	}{
		{"png first", `{"text/plain":"<Figure>","image/png":"iVBORw0KGgo=\n","text/html":"<p>"}`, "image/png", "iVBORw0KGgo="},
		{"jpeg over svg", `{"image/svg+xml":"<svg/>","image/jpeg":"/9j/\n"}`, "image/jpeg", "/9j/"},
		{"svg kept verbatim", `{"image/svg+xml":"<svg/>\n","text/html":"<p>"}`, "image/svg+xml", "<svg/>\n"},
		{"html over plain", `{"text/plain":"df","text/html":"<table>"}`, "text/html", "<table>"},
		{"markdown over json", `{"application/json":{"a":1},"text/markdown":"# x"}`, "text/markdown", "# x"},
		{"json compacted", `{"text/plain":"x","application/json":{"a": [1, 2]}}`, "application/json", `{"a":[1,2]}`},
		{"json string value stays JSON", `{"application/json":"s"}`, "application/json", `"s"`},
		{"latex over plain", `{"text/plain":"x","text/latex":"$x$"}`, "text/latex", "$x$"},
		{"plain", `{"text/plain":"2"}`, "text/plain", "2"},
		{"multiline list", `{"text/plain":["a\n","b"]}`, "text/plain", "a\nb"},
		{"unknown only", `{"application/vnd.b":"b","application/vnd.a":"a"}`, "application/vnd.a", "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var data map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tt.data), &data); err != nil {
				t.Fatal(err)
			}
			mime, text, ok := pickMime(data)
			if !ok || mime != tt.wantMime || text != tt.wantData {
				t.Errorf("pickMime = %q, %q, %v; want %q, %q", mime, text, ok, tt.wantMime, tt.wantData)
			}
		})
	}
	if _, _, ok := pickMime(nil); ok {
		t.Errorf("pickMime(nil) found something")
	}
}

func TestStripANSI(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"\x1b[0;31mZeroDivisionError\x1b[0m", "ZeroDivisionError"},
		{"\x1b[1;32m->\x1b[39;49m 1\x1b[38;5;241m/\x1b[39m0", "-> 1/0"},
		{"\x1b]8;;file:///x.py\x1b\\x.py\x1b]8;;\x1b\\", "x.py"},
		{"\x1b]0;title\x07after", "after"},
	}
	for _, tt := range tests {
		if got := stripANSI(tt.in); got != tt.want {
			t.Errorf("stripANSI(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
