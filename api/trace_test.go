package api

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestTraceSampled(t *testing.T) {
	tests := []struct {
		tp   string
		want bool
	}{
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", true},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03", true},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", false}, // not sampled
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", false}, // invalid trace id
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-zz", false},
		{"00-0af7651916cd43dd-b7ad6b7169203331-01", false},
		{"", false},
		{"garbage", false},
	}
	for _, tt := range tests {
		if got := TraceSampled(tt.tp); got != tt.want {
			t.Errorf("TraceSampled(%q) = %v; want %v", tt.tp, got, tt.want)
		}
	}
}

// TestAgentSpanRoundTrip: every field of AgentSpan survives the trailer's
// JSON (a field added on one side only fails here).
func TestAgentSpanRoundTrip(t *testing.T) {
	in := []AgentSpan{{Name: "kernel.execute", StartUs: 12, DurUs: 3400, Error: "boom"}}
	v := reflect.ValueOf(in[0])
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("field %s is zero in the test value: set it", v.Type().Field(i).Name)
		}
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out []AgentSpan
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip: got %+v; want %+v", out, in)
	}
}
