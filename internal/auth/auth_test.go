package auth

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/store"
)

func TestGenerateParse(t *testing.T) {
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	s := k.String()
	if !strings.HasPrefix(s, "lz_") || len(s) != len("lz_")+8+1+64 {
		t.Fatalf("key %q is not lz_<8 hex>_<64 hex>", s)
	}
	got, err := Parse(s)
	if err != nil || got != k {
		t.Fatalf("Parse(%q) = %+v, %v; want %+v", s, got, err, k)
	}
	k2, _ := Generate()
	if k2 == k {
		t.Fatal("two generated keys are equal")
	}
}

func TestRequire(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateProject(ctx, "proj", time.Now()); err != nil {
		t.Fatal(err)
	}
	good, err := Create(ctx, st, "proj", "")
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := Create(ctx, st, "proj", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeAPIKey(ctx, revoked.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	expired, err := CreateUntil(ctx, st, "proj", "", time.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	unexpired, err := CreateUntil(ctx, st, "proj", "", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	unknown, _ := Generate()
	wrongSecret := Key{ID: good.ID, Secret: strings.Repeat("0", 64)}

	v := &Verifier{Store: st}
	h := v.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := ProjectID(r.Context())
		io.WriteString(w, "ok "+p)
	}))

	const want401 = `{"code":"unauthenticated","message":"missing or invalid API key: send Authorization: Bearer \u003ckey\u003e with a key from ` + "`lizard admin create-project`" + `"}` + "\n"
	tests := []struct {
		name   string
		header string // Authorization; "" sends none
		status int
		body   string
	}{
		{"good key", "Bearer " + good.String(), 200, "ok proj"},
		{"lowercase scheme", "bearer " + good.String(), 200, "ok proj"},
		{"wrong secret", "Bearer " + wrongSecret.String(), 401, want401},
		{"unknown id", "Bearer " + unknown.String(), 401, want401},
		{"malformed", "Bearer lz_nothex!!_abc", 401, want401},
		{"no prefix", "Bearer " + strings.TrimPrefix(good.String(), "lz_"), 401, want401},
		{"uppercase hex", "Bearer " + strings.ToUpper(good.String()), 401, want401},
		{"revoked", "Bearer " + revoked.String(), 401, want401},
		{"expired", "Bearer " + expired.String(), 401, want401},
		{"not yet expired", "Bearer " + unexpired.String(), 200, "ok proj"},
		{"missing header", "", 401, want401},
		{"not Bearer", "Basic " + good.String(), 401, want401},
		{"Bearer without token", "Bearer", 401, want401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.status || w.Body.String() != tt.body {
				t.Errorf("got %d %q; want %d %q", w.Code, w.Body.String(), tt.status, tt.body)
			}
		})
	}
}

func TestSandboxKeyRevokedWithSandbox(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.CreateProject(ctx, "proj", time.Now())
	sb := store.Sandbox{ID: "sb1", ProjectID: "proj", Template: "t", State: "running", CreatedAt: time.Now()}
	if err := st.CreateSandbox(ctx, &sb, 4, func(int) (string, string) { return "h", "g" }); err != nil {
		t.Fatal(err)
	}
	k, err := Create(ctx, st, "proj", "sb1")
	if err != nil {
		t.Fatal(err)
	}
	v := &Verifier{Store: st}
	if p, err := v.Verify(ctx, k.String()); err != nil || p != "proj" {
		t.Fatalf("Verify before the sandbox ended = %q, %v; want proj", p, err)
	}
	if err := st.EndSandbox(ctx, "sb1", "killed", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, k.String()); err == nil {
		t.Fatal("sandbox key still valid after its sandbox ended")
	}
}
