package desktop

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

func ptr(v int) *int { return &v }

func TestMouseArgs(t *testing.T) {
	tests := []struct {
		name string
		req  api.DesktopMouseRequest
		want string // the argv joined by spaces; "" when refused
		err  string
	}{
		{name: "move", req: api.DesktopMouseRequest{Action: "move", X: ptr(10), Y: ptr(20)}, want: "xdotool mousemove 10 20 getmouselocation --shell"},
		{name: "click here", req: api.DesktopMouseRequest{Action: "click"}, want: "xdotool click --repeat 1 --delay 80 1 getmouselocation --shell"},
		{name: "double right click there", req: api.DesktopMouseRequest{Action: "click", X: ptr(1), Y: ptr(2), Button: "right", Count: 2}, want: "xdotool mousemove 1 2 click --repeat 2 --delay 80 3 getmouselocation --shell"},
		{name: "down middle", req: api.DesktopMouseRequest{Action: "down", Button: "middle"}, want: "xdotool mousedown 2 getmouselocation --shell"},
		{name: "up", req: api.DesktopMouseRequest{Action: "up"}, want: "xdotool mouseup 1 getmouselocation --shell"},
		{name: "drag", req: api.DesktopMouseRequest{Action: "drag", X: ptr(1), Y: ptr(2), ToX: ptr(3), ToY: ptr(4)}, want: "xdotool mousemove 1 2 mousedown 1 sleep 0.1 mousemove 3 4 sleep 0.1 mouseup 1 getmouselocation --shell"},
		{name: "scroll up 3", req: api.DesktopMouseRequest{Action: "scroll", Direction: "up", Count: 3}, want: "xdotool click --repeat 3 --delay 20 4 getmouselocation --shell"},
		{name: "scroll default down", req: api.DesktopMouseRequest{Action: "scroll"}, want: "xdotool click --repeat 1 --delay 20 5 getmouselocation --shell"},
		{name: "negative x", req: api.DesktopMouseRequest{Action: "move", X: ptr(-1), Y: ptr(0)}, err: "x -1 is off any screen"},
		{name: "huge y", req: api.DesktopMouseRequest{Action: "click", X: ptr(0), Y: ptr(1 << 40)}, err: "is off any screen"},
		{name: "huge toX", req: api.DesktopMouseRequest{Action: "drag", X: ptr(0), Y: ptr(0), ToX: ptr(16384), ToY: ptr(0)}, err: "toX 16384 is off any screen"},
		{name: "move without y", req: api.DesktopMouseRequest{Action: "move", X: ptr(1)}, err: "y is required"},
		{name: "click with x alone", req: api.DesktopMouseRequest{Action: "click", X: ptr(1)}, err: "y is required"},
		{name: "too many clicks", req: api.DesktopMouseRequest{Action: "click", Count: 11}, err: "count 11"},
		{name: "negative count", req: api.DesktopMouseRequest{Action: "scroll", Count: -1}, err: "count -1"},
		{name: "bad button", req: api.DesktopMouseRequest{Action: "click", Button: "4"}, err: "button"},
		{name: "bad direction", req: api.DesktopMouseRequest{Action: "scroll", Direction: "in"}, err: "direction"},
		{name: "no action", req: api.DesktopMouseRequest{}, err: "action"},
		{name: "to on a click", req: api.DesktopMouseRequest{Action: "click", ToX: ptr(1), ToY: ptr(1)}, err: "drag's alone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args, err := mouseArgs(tc.req)
			checkArgs(t, args, err, tc.want, tc.err)
		})
	}
}

func checkArgs(t *testing.T, args []string, err error, want, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(errdefs.Message(err), wantErr) {
			t.Fatalf("err = %v, want a 400 saying %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("err = %v", err)
	}
	if got := strings.Join(args, " "); got != want {
		t.Errorf("args = %q\nwant   %q", got, want)
	}
}

// TestTextIsData: what a caller types or presses is one argument of
// xdotool's, after "--", whatever shell or option syntax it holds.
func TestTextIsData(t *testing.T) {
	for _, text := range []string{"$(touch /tmp/pwned)", "`id`; rm -rf / #", "a' \"b\" | c && d > /tmp/x", "--help", "-v", "line\nbreak\ttab", "ünïcødé 🦎"} {
		args, timeout, err := keyboardArgs(api.DesktopKeyboardRequest{Action: "type", Text: text})
		if err != nil {
			t.Fatalf("type %q: %v", text, err)
		}
		if want := []string{"xdotool", "type", "--delay", "12", "--", text}; !slices.Equal(args, want) {
			t.Errorf("type %q: args = %q, want %q", text, args, want)
		}
		if timeout < callTimeout {
			t.Errorf("type %q: timeout %v", text, timeout)
		}
	}
	args, _, err := keyboardArgs(api.DesktopKeyboardRequest{Action: "press", Keys: []string{"ctrl+c", "enter", "Escape", "alt+F4", "pageDown"}, DelayMs: ptr(0)})
	checkArgs(t, args, err, "xdotool key --delay 0 -- ctrl+c Return Escape alt+F4 Page_Down", "")
}

func TestKeyboardRefusals(t *testing.T) {
	tests := []struct {
		name string
		req  api.DesktopKeyboardRequest
		err  string
	}{
		{"key with a shell's syntax", api.DesktopKeyboardRequest{Action: "press", Keys: []string{"ctrl+c; rm -rf /"}}, "X key names"},
		{"key as an option", api.DesktopKeyboardRequest{Action: "press", Keys: []string{"--window"}}, "X key names"},
		{"empty key", api.DesktopKeyboardRequest{Action: "press", Keys: []string{""}}, "X key names"},
		{"dangling plus", api.DesktopKeyboardRequest{Action: "press", Keys: []string{"ctrl+"}}, "X key names"},
		{"no keys", api.DesktopKeyboardRequest{Action: "press"}, "keys: want 1 to 32"},
		{"too many keys", api.DesktopKeyboardRequest{Action: "press", Keys: make([]string, 33)}, "keys: want 1 to 32"},
		{"long key", api.DesktopKeyboardRequest{Action: "press", Keys: []string{strings.Repeat("a", 65)}}, "X key names"},
		{"no text", api.DesktopKeyboardRequest{Action: "type"}, "text is required"},
		{"too much text", api.DesktopKeyboardRequest{Action: "type", Text: strings.Repeat("a", maxTypeBytes+1)}, "at most 10000"},
		{"NUL", api.DesktopKeyboardRequest{Action: "type", Text: "a\x00b"}, "NUL"},
		{"not UTF-8", api.DesktopKeyboardRequest{Action: "type", Text: "\xff"}, "UTF-8"},
		{"typing too long", api.DesktopKeyboardRequest{Action: "type", Text: strings.Repeat("a", 1000), DelayMs: ptr(100)}, "over the bound"},
		{"negative delay", api.DesktopKeyboardRequest{Action: "type", Text: "a", DelayMs: ptr(-1)}, "delayMs -1"},
		{"keys on type", api.DesktopKeyboardRequest{Action: "type", Text: "a", Keys: []string{"a"}}, "keys are press's"},
		{"text on press", api.DesktopKeyboardRequest{Action: "press", Text: "a", Keys: []string{"a"}}, "text is type's"},
		{"no action", api.DesktopKeyboardRequest{Text: "a"}, "action"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args, _, err := keyboardArgs(tc.req)
			checkArgs(t, args, err, "", tc.err)
		})
	}
}

func TestOpenAndLaunchArgs(t *testing.T) {
	args, err := openArgs("/home/user/a page; $(id).html")
	checkArgs(t, args, err, "xdg-open /home/user/a page; $(id).html", "")
	args, err = openArgs("http://127.0.0.1:8000/?a=1&b=2")
	checkArgs(t, args, err, "xdg-open http://127.0.0.1:8000/?a=1&b=2", "")
	for target, want := range map[string]string{"": "required", "--help": "starts with -", "a\nb": "one line", strings.Repeat("a", 4097): "at most 4096"} {
		args, err := openArgs(target)
		checkArgs(t, args, err, "", want)
	}
	args, err = launchArgs("xfce4-terminal")
	checkArgs(t, args, err, "gtk-launch xfce4-terminal", "")
	for _, app := range []string{"", "-x", "a b", "../x", "a;b"} {
		args, err := launchArgs(app)
		checkArgs(t, args, err, "", "desktop entry")
	}
}

func TestScreenshotArgs(t *testing.T) {
	if got := strings.Join(screenshotArgs("/tmp/s.png", nil), " "); got != "scrot --overwrite --silent /tmp/s.png" {
		t.Errorf("whole screen: %q", got)
	}
	if got := strings.Join(screenshotArgs("/tmp/s.png", &region{1, 2, 3, 4}), " "); got != "scrot --overwrite --silent --autoselect 1,2,3,4 /tmp/s.png" {
		t.Errorf("region: %q", got)
	}
	screen := api.DesktopScreen{Width: 1024, Height: 768}
	for _, r := range []region{{0, 0, 0, 1}, {0, 0, 1025, 1}, {1000, 0, 25, 1}, {0, 700, 1, 69}} {
		if err := checkRegion(r, screen); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("region %+v: err = %v, want a 400", r, err)
		}
	}
	if err := checkRegion(region{0, 0, 1024, 768}, screen); err != nil {
		t.Errorf("the whole screen as a region: %v", err)
	}
}

func TestParse(t *testing.T) {
	c, err := parseCursor("X=512\nY=384\nSCREEN=0\nWINDOW=123\n")
	if err != nil || c != (api.DesktopCursor{X: 512, Y: 384}) {
		t.Errorf("cursor = %+v, %v", c, err)
	}
	if _, err := parseCursor("garbage"); !errors.Is(err, errdefs.ErrBadGateway) {
		t.Errorf("garbage cursor: err = %v, want a bad gateway", err)
	}
	s, err := parseScreen("1024 768\n")
	if err != nil || s != (api.DesktopScreen{Width: 1024, Height: 768}) {
		t.Errorf("screen = %+v, %v", s, err)
	}
	if _, err := parseScreen("0 x"); !errors.Is(err, errdefs.ErrBadGateway) {
		t.Errorf("bad screen: err = %v", err)
	}
	out := "ACTIVE 42\nWINDOW 42\nWINDOW=42\nX=10\nY=20\nWIDTH=300\nHEIGHT=200\nSCREEN=0\nCLASS Y2hyb21pdW0=\nTITLE dGl0bGUKd2l0aCBuZXdsaW5l\n" +
		"WINDOW 7\nX=-1000\nY=-1000\nWIDTH=5\nHEIGHT=5\nCLASS eGZ3bTQ=\nTITLE eGZ3bTQ=\n"
	list, err := parseWindows(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.DesktopWindow{{ID: "42", Title: "title\nwith newline", Class: "chromium", X: 10, Y: 20, Width: 300, Height: 200, Active: true}}
	if !slices.Equal(list.Windows, want) {
		t.Errorf("windows = %+v\nwant %+v (off-screen windows left out)", list.Windows, want)
	}
	if _, err := parseWindows("WINDOW 1\nTITLE !!!\n"); !errors.Is(err, errdefs.ErrBadGateway) {
		t.Errorf("bad title: err = %v", err)
	}
}

func TestViewers(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	vs := newViewers(func() time.Time { return now })
	ctx := context.Background()
	var tokens []string
	var ids []string
	for i := range maxViewers {
		v, tok, err := vs.mint("p", "sb", i == 0, time.Hour)
		if err != nil {
			t.Fatalf("viewer %d: %v", i+1, err)
		}
		if !strings.HasPrefix(tok, "lzv_") || slices.Contains(tokens, tok) {
			t.Fatalf("token %q: want a new lzv_ token", tok)
		}
		tokens, ids = append(tokens, tok), append(ids, v.id)
	}
	if _, _, err := vs.mint("p", "sb", false, time.Hour); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(errdefs.Message(err), "its most") {
		t.Fatalf("viewer %d: err = %v, want a 409 naming the bound", maxViewers+1, err)
	}
	// Another sandbox has its own bound.
	if _, _, err := vs.mint("p", "other", false, time.Hour); err != nil {
		t.Fatalf("another sandbox's viewer: %v", err)
	}

	v, _, done, err := vs.open(ctx, tokens[0], "sb")
	if err != nil || !v.control {
		t.Fatalf("open: %v, %+v", err, v)
	}
	done()
	for name, try := range map[string]func() error{
		"no token":            func() error { _, _, _, err := vs.open(ctx, "", "sb"); return err },
		"unknown token":       func() error { _, _, _, err := vs.open(ctx, "lzv_nope", "sb"); return err },
		"another sandbox's":   func() error { _, _, _, err := vs.open(ctx, tokens[1], "other"); return err },
		"token's prefix only": func() error { _, _, _, err := vs.open(ctx, tokens[1][:20], "sb"); return err },
	} {
		if err := try(); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("%s: err = %v, want a 401", name, err)
		}
	}

	// Connections per viewer are bounded; a revoke ends the open ones.
	_, c1, done1, err := vs.open(ctx, tokens[1], "sb")
	if err != nil {
		t.Fatal(err)
	}
	_, c2, done2, err := vs.open(ctx, tokens[1], "sb")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := vs.open(ctx, tokens[1], "sb"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a third connection: err = %v, want a 409", err)
	}
	if vs.revokeOf("another project", "sb", ids[1]) {
		t.Errorf("another project revoked the viewer")
	}
	if !vs.revokeOf("p", "sb", ids[1]) {
		t.Fatalf("revoke: not found")
	}
	for _, c := range []context.Context{c1, c2} {
		if !errors.Is(context.Cause(c), errRevoked) {
			t.Errorf("an open connection after the revoke: cause = %v", context.Cause(c))
		}
	}
	done1()
	done2()
	if _, _, _, err := vs.open(ctx, tokens[1], "sb"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("a revoked token: err = %v, want a 401", err)
	}
	// The revoke freed a place.
	if _, _, err := vs.mint("p", "sb", false, time.Hour); err != nil {
		t.Errorf("after a revoke: %v", err)
	}

	// Expiry.
	now = now.Add(time.Hour)
	if _, _, _, err := vs.open(ctx, tokens[2], "sb"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("an expired token: err = %v, want a 401", err)
	}
	// Stop revokes all.
	vs.stop("sb")
	if len(vs.bySandbox["sb"]) != 0 {
		t.Errorf("after stop: %d viewers", len(vs.bySandbox["sb"]))
	}
}

// TestSettle: a move's answer names where the pointer went, read again
// while the X server has not yet applied the move, and gives up after a
// bounded number of reads (a place off the screen is never reached).
func TestSettle(t *testing.T) {
	at := func(x, y int) api.DesktopCursor { return api.DesktopCursor{X: x, Y: y} }
	for _, tc := range []struct {
		name      string
		got, want api.DesktopCursor
		reads     []api.DesktopCursor
		fail      bool
		answer    api.DesktopCursor
		readsUsed int
	}{
		{name: "already there", got: at(10, 20), want: at(10, 20), answer: at(10, 20)},
		{name: "arrives on the second read", got: at(300, 200), want: at(10, 20), reads: []api.DesktopCursor{at(300, 200), at(10, 20)}, answer: at(10, 20), readsUsed: 2},
		{name: "clamped, never reached", got: at(1023, 767), want: at(16000, 16000), reads: []api.DesktopCursor{at(1023, 767), at(1023, 767), at(1023, 767), at(1023, 767), at(1023, 767), at(1, 1)}, answer: at(1023, 767), readsUsed: settleReads},
		{name: "a failed read keeps the answer", got: at(300, 200), want: at(10, 20), fail: true, answer: at(300, 200), readsUsed: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			used := 0
			c := settle(context.Background(), tc.got, tc.want, func() (api.DesktopCursor, error) {
				used++
				if tc.fail {
					return api.DesktopCursor{}, errors.New("agent gone")
				}
				return tc.reads[used-1], nil
			})
			if c != tc.answer || used != tc.readsUsed {
				t.Errorf("settle = %+v after %d reads; want %+v after %d", c, used, tc.answer, tc.readsUsed)
			}
		})
	}
}

func TestMouseTarget(t *testing.T) {
	for _, tc := range []struct {
		req  api.DesktopMouseRequest
		want api.DesktopCursor
		ok   bool
	}{
		{api.DesktopMouseRequest{Action: api.MouseMove, X: ptr(1), Y: ptr(2)}, api.DesktopCursor{X: 1, Y: 2}, true},
		{api.DesktopMouseRequest{Action: api.MouseClick}, api.DesktopCursor{}, false},
		{api.DesktopMouseRequest{Action: api.MouseDrag, X: ptr(1), Y: ptr(2), ToX: ptr(30), ToY: ptr(40)}, api.DesktopCursor{X: 30, Y: 40}, true},
	} {
		if got, ok := mouseTarget(tc.req); got != tc.want || ok != tc.ok {
			t.Errorf("mouseTarget(%+v) = %+v, %v; want %+v, %v", tc.req, got, ok, tc.want, tc.ok)
		}
	}
}
