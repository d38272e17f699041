package agentproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestTransport: a request in the public API's form goes to the agent
// path of the call's URL (an agent's, or a node's sandbox path), without
// the caller's key; a run's outcome is told to Observe, and to the
// call's Outcome only on the hop to the agent itself; MaxJSON bounds an
// answer read through it.
func TestTransport(t *testing.T) {
	type seen struct{ path, query, auth string }
	got := make(chan seen, 1)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization")}
		switch {
		case strings.HasSuffix(r.URL.Path, "/execute"):
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-ndjson")
			io.WriteString(w, `{"type":"error","error":{"name":"TimeoutError","message":"execution timed out after 1s","traceback":""}}`+"\n"+`{"type":"end"}`+"\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"name":"a-long-file-name"}`)
		}
	}))
	defer agent.Close()
	base, _ := url.Parse(agent.URL)
	for _, tc := range []struct {
		name, nodePath string
		notable        bool
	}{
		{"agent", "", true},
		{"node", "/v1/sandboxes/sb1", false},
	} {
		var notable []string
		var outcomes []Outcome
		u := *base
		u.Path = tc.nodePath
		call := Call{URL: &u, Ctx: context.Background(), Outcome: func(name, msg string) { notable = append(notable, name+": "+msg) }}
		c := Client(call, http.DefaultTransport, func(o Outcome) { outcomes = append(outcomes, o) })

		req, _ := http.NewRequest(http.MethodGet, "http://sandbox/v1/sandboxes/sb1/files/stat?path=%2Fa", nil)
		req.Header.Set("Authorization", "Bearer the-callers-key")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if s := <-got; s.path != tc.nodePath+"/files/stat" || s.query != "path=%2Fa" || s.auth != "" {
			t.Errorf("%s: the agent saw %+v; want %s/files/stat, path=%%2Fa and no key", tc.name, s, tc.nodePath)
		}

		resp, err = c.Post("http://sandbox/v1/sandboxes/sb1/execute", "application/json", strings.NewReader(`{"code":"sleep 9","language":"bash"}`))
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		<-got
		if len(outcomes) != 1 || outcomes[0].Op != OpExecute || outcomes[0].Language != "bash" || outcomes[0].Result != ResultTimeout ||
			outcomes[0].ErrorName != "TimeoutError" {
			t.Errorf("%s: observed %+v; want one bash runCode that timed out", tc.name, outcomes)
		}
		if want := tc.notable; (len(notable) == 1) != want || (want && notable[0] != "TimeoutError: execution timed out after 1s") {
			t.Errorf("%s: the call was told %q; want it told the timeout: %v", tc.name, notable, want)
		}
	}

	small := &Transport{Call: Call{URL: base, Ctx: context.Background()}, Base: http.DefaultTransport, MaxJSON: 10}
	resp, err := (&http.Client{Transport: small}).Get("http://sandbox/v1/sandboxes/sb1/files/stat?path=/a")
	if err != nil {
		t.Fatal(err)
	}
	<-got
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, ErrAnswerTooLarge) || !strings.Contains(err.Error(), "answer to GET /files/stat was too large") {
		t.Errorf("an answer past MaxJSON: %v; want ErrAnswerTooLarge naming the call", err)
	}

	if _, err := (&http.Client{Transport: small}).Get("http://sandbox/v1/health"); err == nil {
		t.Error("a path outside /v1/sandboxes/{id} was carried; want refused")
	}
}
