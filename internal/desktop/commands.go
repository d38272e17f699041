package desktop

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Every call here is an argument vector run by the agent without a shell
// (api.ProcessRequest.Args): text, key names, paths and URLs are xdotool's,
// xdg-open's or gtk-launch's data, never a shell's. What a caller sends is
// still checked, so that it cannot become another program's option (a
// target starting with -) or a call without end.

// Bounds of what one call may ask.
const (
	maxTypeBytes  = 10_000
	maxKeys       = 32
	maxKeyLen     = 64
	maxClicks     = 10
	maxScrolls    = 100
	maxDelayMs    = 1_000
	defaultDelay  = 12 // xdotool's own default, in ms
	maxTargetLen  = 4096
	maxTypingTime = 60 * time.Second
	// callTimeout bounds every command but typing, whose bound grows with
	// its text.
	callTimeout = 15 * time.Second
)

func coordinate(name string, v *int) (string, error) {
	if v == nil {
		return "", errdefs.Invalidf("%s is required", name)
	}
	if *v < 0 || *v > api.MaxDesktopCoordinate {
		return "", errdefs.Invalidf("%s %d is off any screen: want 0 to %d pixels from the top left", name, *v, api.MaxDesktopCoordinate)
	}
	return strconv.Itoa(*v), nil
}

// moveTo is xdotool's move to (x, y), or nothing when neither is given.
func moveTo(x, y *int, required bool) ([]string, error) {
	if x == nil && y == nil && !required {
		return nil, nil
	}
	xs, err := coordinate("x", x)
	if err != nil {
		return nil, err
	}
	ys, err := coordinate("y", y)
	if err != nil {
		return nil, err
	}
	// No --sync: xdotool then waits for a motion, and a move to where the
	// pointer is makes none (it hung until the call's deadline). The X
	// server applies requests of one connection in order, so what follows
	// in the same command sees the pointer moved.
	return []string{"mousemove", xs, ys}, nil
}

var buttons = map[string]string{"": "1", api.ButtonLeft: "1", api.ButtonMiddle: "2", api.ButtonRight: "3"}

var scrollButtons = map[string]string{"": "5", api.ScrollUp: "4", api.ScrollDown: "5", api.ScrollLeft: "6", api.ScrollRight: "7"}

// whereAmI ends every mouse command: its answer is the pointer's place.
var whereAmI = []string{"getmouselocation", "--shell"}

// mouseArgs is the xdotool command of req, which ends by printing where
// the pointer is.
func mouseArgs(req api.DesktopMouseRequest) ([]string, error) {
	button, ok := buttons[req.Button]
	if !ok {
		return nil, errdefs.Invalidf("button %q: want left, middle or right", req.Button)
	}
	args := []string{"xdotool"}
	count := func(limit int) (string, error) {
		if req.Count == 0 {
			return "1", nil
		}
		if req.Count < 1 || req.Count > limit {
			return "", errdefs.Invalidf("count %d: want 1 to %d", req.Count, limit)
		}
		return strconv.Itoa(req.Count), nil
	}
	switch req.Action {
	case api.MouseMove:
		mv, err := moveTo(req.X, req.Y, true)
		if err != nil {
			return nil, err
		}
		args = append(args, mv...)
	case api.MouseClick, api.MouseDown, api.MouseUp:
		mv, err := moveTo(req.X, req.Y, false)
		if err != nil {
			return nil, err
		}
		args = append(args, mv...)
		switch req.Action {
		case api.MouseClick:
			n, err := count(maxClicks)
			if err != nil {
				return nil, err
			}
			args = append(args, "click", "--repeat", n, "--delay", "80", button)
		case api.MouseDown:
			args = append(args, "mousedown", button)
		default:
			args = append(args, "mouseup", button)
		}
	case api.MouseDrag:
		from, err := moveTo(req.X, req.Y, true)
		if err != nil {
			return nil, err
		}
		tx, err := coordinate("toX", req.ToX)
		if err != nil {
			return nil, err
		}
		ty, err := coordinate("toY", req.ToY)
		if err != nil {
			return nil, err
		}
		// The pauses let an application see a press, a move and a
		// release rather than one instant.
		args = append(args, from...)
		args = append(args, "mousedown", button, "sleep", "0.1", "mousemove", tx, ty, "sleep", "0.1", "mouseup", button)
	case api.MouseScroll:
		dir, ok := scrollButtons[req.Direction]
		if !ok {
			return nil, errdefs.Invalidf("direction %q: want up, down, left or right", req.Direction)
		}
		mv, err := moveTo(req.X, req.Y, false)
		if err != nil {
			return nil, err
		}
		n, err := count(maxScrolls)
		if err != nil {
			return nil, err
		}
		args = append(args, mv...)
		args = append(args, "click", "--repeat", n, "--delay", "20", dir)
	default:
		return nil, errdefs.Invalidf("action %q: want move, click, down, up, drag or scroll", req.Action)
	}
	if req.Action != api.MouseDrag && (req.ToX != nil || req.ToY != nil) {
		return nil, errdefs.Invalidf("toX and toY are drag's alone")
	}
	return append(args, whereAmI...), nil
}

// keyName is one key combination: X keysym names (or the aliases below)
// joined by +, such as ctrl+shift+t or Return.
var keyName = regexp.MustCompile(`^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$`)

// keyAliases are the names agents use for keys whose X keysym is spelled
// otherwise (computer-use models say "enter", X says Return).
var keyAliases = map[string]string{
	"enter": "Return", "return": "Return", "esc": "Escape", "escape": "Escape", "backspace": "BackSpace",
	"tab": "Tab", "space": "space", "delete": "Delete", "del": "Delete", "insert": "Insert",
	"up": "Up", "down": "Down", "left": "Left", "right": "Right", "home": "Home", "end": "End",
	"pageup": "Page_Up", "page_up": "Page_Up", "pagedown": "Page_Down", "page_down": "Page_Down",
	"ctrl": "ctrl", "control": "ctrl", "alt": "alt", "shift": "shift", "super": "super", "meta": "meta",
	"win": "super", "cmd": "super", "capslock": "Caps_Lock", "caps_lock": "Caps_Lock",
}

func keyCombo(k string) (string, error) {
	if len(k) > maxKeyLen || !keyName.MatchString(k) {
		return "", errdefs.Invalidf("key %q: want X key names (letters, digits, _) joined by +, such as ctrl+c, Return or F5, at most %d bytes", k, maxKeyLen)
	}
	parts := strings.Split(k, "+")
	for i, p := range parts {
		if a, ok := keyAliases[strings.ToLower(p)]; ok {
			parts[i] = a
		}
	}
	return strings.Join(parts, "+"), nil
}

// keyboardArgs is the xdotool command of req and how long it may take.
func keyboardArgs(req api.DesktopKeyboardRequest) ([]string, time.Duration, error) {
	delay := defaultDelay
	if req.DelayMs != nil {
		if *req.DelayMs < 0 || *req.DelayMs > maxDelayMs {
			return nil, 0, errdefs.Invalidf("delayMs %d: want 0 to %d", *req.DelayMs, maxDelayMs)
		}
		delay = *req.DelayMs
	}
	switch req.Action {
	case api.KeyboardType:
		if len(req.Keys) > 0 {
			return nil, 0, errdefs.Invalidf("keys are press's: type takes text")
		}
		switch {
		case req.Text == "":
			return nil, 0, errdefs.Invalidf("text is required")
		case len(req.Text) > maxTypeBytes:
			return nil, 0, errdefs.Invalidf("text of %d bytes: at most %d in one call", len(req.Text), maxTypeBytes)
		case !utf8.ValidString(req.Text) || strings.ContainsRune(req.Text, 0):
			return nil, 0, errdefs.Invalidf("text must be UTF-8 without NUL bytes")
		}
		took := time.Duration(utf8.RuneCountInString(req.Text)*delay) * time.Millisecond
		if took > maxTypingTime {
			return nil, 0, errdefs.Invalidf("typing %d characters %d ms apart takes %v, over the bound of %v: send less text, or a shorter delayMs", utf8.RuneCountInString(req.Text), delay, took, maxTypingTime)
		}
		// "--" ends xdotool's options: text starting with - is typed.
		return []string{"xdotool", "type", "--delay", strconv.Itoa(delay), "--", req.Text}, callTimeout + took, nil
	case api.KeyboardPress:
		if req.Text != "" {
			return nil, 0, errdefs.Invalidf("text is type's: press takes keys")
		}
		if len(req.Keys) == 0 || len(req.Keys) > maxKeys {
			return nil, 0, errdefs.Invalidf("keys: want 1 to %d key combinations, got %d", maxKeys, len(req.Keys))
		}
		args := []string{"xdotool", "key", "--delay", strconv.Itoa(delay), "--"}
		for _, k := range req.Keys {
			c, err := keyCombo(k)
			if err != nil {
				return nil, 0, err
			}
			args = append(args, c)
		}
		return args, callTimeout + time.Duration(len(req.Keys)*delay)*time.Millisecond, nil
	default:
		return nil, 0, errdefs.Invalidf("action %q: want type or press", req.Action)
	}
}

// region is a screenshot's part of the screen.
type region struct{ x, y, w, h int }

// screenshotArgs is scrot's command writing the screen, or r of it, to
// path as a PNG.
func screenshotArgs(path string, r *region) []string {
	args := []string{"scrot", "--overwrite", "--silent"}
	if r != nil {
		args = append(args, "--autoselect", fmt.Sprintf("%d,%d,%d,%d", r.x, r.y, r.w, r.h))
	}
	return append(args, path)
}

// checkRegion refuses a region not inside a screen of size s.
func checkRegion(r region, s api.DesktopScreen) error {
	if r.w < 1 || r.h < 1 || r.x < 0 || r.y < 0 || r.x+r.w > s.Width || r.y+r.h > s.Height {
		return errdefs.Invalidf("region x=%d y=%d width=%d height=%d is not inside the %dx%d screen", r.x, r.y, r.w, r.h, s.Width, s.Height)
	}
	return nil
}

// openArgs is xdg-open of target, a path or URL.
func openArgs(target string) ([]string, error) {
	switch {
	case target == "":
		return nil, errdefs.Invalidf("target is required: a file's path or a URL")
	case len(target) > maxTargetLen:
		return nil, errdefs.Invalidf("target of %d bytes: at most %d", len(target), maxTargetLen)
	case strings.HasPrefix(target, "-"):
		// xdg-open takes no "--": this would be its option.
		return nil, errdefs.Invalidf("target %q starts with -: give a path (./%s) or a URL", target, target)
	case strings.ContainsAny(target, "\x00\n\r"):
		return nil, errdefs.Invalidf("target must be one line without NUL bytes")
	}
	return []string{"xdg-open", target}, nil
}

// appName is a desktop entry's name, as gtk-launch takes it.
var appName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// launchArgs is gtk-launch of app.
func launchArgs(app string) ([]string, error) {
	if !appName.MatchString(app) {
		return nil, errdefs.Invalidf("app %q: want a desktop entry's name (letters, digits, . _ -), such as chromium or xfce4-terminal", app)
	}
	return []string{"gtk-launch", app}, nil
}

// screenArgs prints the screen's size.
var screenArgs = []string{"xdotool", "getdisplaygeometry"}

// cursorArgs prints where the pointer is.
var cursorArgs = append([]string{"xdotool"}, whereAmI...)

// windowsArgs lists the visible windows that have a title: a fixed script,
// no caller's data in it. Each window is a block: its id, xdotool's
// geometry, then its class and title base64-encoded (a title may hold any
// byte, newlines included).
var windowsArgs = []string{"/bin/bash", "-c", `
printf 'ACTIVE %s\n' "$(xdotool getactivewindow 2>/dev/null)"
for w in $(xdotool search --onlyvisible --name '.' 2>/dev/null); do
	printf 'WINDOW %s\n' "$w"
	xdotool getwindowgeometry --shell "$w" 2>/dev/null
	printf 'CLASS %s\n' "$(xprop -id "$w" WM_CLASS 2>/dev/null | sed -n 's/.*= "\([^"]*\)".*/\1/p' | base64 -w0)"
	printf 'TITLE %s\n' "$(xdotool getwindowname "$w" 2>/dev/null | base64 -w0)"
done`}

// keyValues reads xdotool's --shell output (X=1\nY=2).
func keyValues(out string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}

// badAnswer is what the sandbox's tools printed that this cannot read: the
// sandbox's code may have replaced them.
func badAnswer(what, out string) error {
	if len(out) > 200 {
		out = out[:200] + "..."
	}
	return &errdefs.Error{Kind: errdefs.ErrBadGateway, Msg: fmt.Sprintf("the sandbox's %s answered what Lizard cannot read: %q", what, out)}
}

func parseCursor(out string) (api.DesktopCursor, error) {
	m := keyValues(out)
	x, errx := strconv.Atoi(m["X"])
	y, erry := strconv.Atoi(m["Y"])
	if errx != nil || erry != nil {
		return api.DesktopCursor{}, badAnswer("xdotool getmouselocation", out)
	}
	return api.DesktopCursor{X: x, Y: y}, nil
}

func parseScreen(out string) (api.DesktopScreen, error) {
	f := strings.Fields(out)
	if len(f) != 2 {
		return api.DesktopScreen{}, badAnswer("xdotool getdisplaygeometry", out)
	}
	w, errw := strconv.Atoi(f[0])
	h, errh := strconv.Atoi(f[1])
	if errw != nil || errh != nil || w < 1 || h < 1 {
		return api.DesktopScreen{}, badAnswer("xdotool getdisplaygeometry", out)
	}
	return api.DesktopScreen{Width: w, Height: h}, nil
}

// maxWindows bounds a listing: code in the sandbox may open windows
// without end.
const maxWindows = 1000

func parseWindows(out string) (api.DesktopWindowList, error) {
	list := api.DesktopWindowList{Windows: []api.DesktopWindow{}}
	var active string
	var cur *api.DesktopWindow
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		key, val, _ := strings.Cut(line, " ")
		switch {
		case key == "ACTIVE":
			active = val
		case key == "WINDOW":
			if len(list.Windows) == maxWindows {
				return list, nil
			}
			list.Windows = append(list.Windows, api.DesktopWindow{ID: val, Active: val != "" && val == active})
			cur = &list.Windows[len(list.Windows)-1]
		case cur == nil:
		case key == "CLASS" || key == "TITLE":
			b, err := base64.StdEncoding.DecodeString(val)
			if err != nil {
				return list, badAnswer("window listing", line)
			}
			s := strings.TrimSuffix(strings.ToValidUTF8(string(b), "\uFFFD"), "\n")
			if key == "CLASS" {
				cur.Class = s
			} else {
				cur.Title = s
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			n, err := strconv.Atoi(v)
			if !ok || err != nil {
				continue
			}
			switch k {
			case "X":
				cur.X = n
			case "Y":
				cur.Y = n
			case "WIDTH":
				cur.Width = n
			case "HEIGHT":
				cur.Height = n
			}
		}
	}
	// Windows wholly off the screen (the window manager's own, at
	// -1000,-1000) are not what a user sees.
	list.Windows = slices.DeleteFunc(list.Windows, func(w api.DesktopWindow) bool { return w.X+w.Width <= 0 || w.Y+w.Height <= 0 })
	return list, nil
}
