package sudo

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Request
		act  action
		err  string // a usage error's message, "" for usage alone
	}{
		{args: []string{"whoami"}, want: Request{Command: []string{"whoami"}}},
		{args: []string{"-u", "user", "id", "-u"}, want: Request{User: "user", Command: []string{"id", "-u"}}},
		{args: []string{"-uuser", "id"}, want: Request{User: "user", Command: []string{"id"}}},
		{args: []string{"--user=user", "id"}, want: Request{User: "user", Command: []string{"id"}}},
		{args: []string{"--user", "#1000", "id"}, want: Request{User: "#1000", Command: []string{"id"}}},
		{args: []string{"-iu", "root"}, want: Request{Login: true, User: "root"}},
		{args: []string{"-nE", "env"}, want: Request{PreserveEnv: true, Command: []string{"env"}}},
		{args: []string{"-S", "-H", "-s", "echo", "a"}, want: Request{SetHome: true, Shell: true, Command: []string{"echo", "a"}}},
		{args: []string{"--preserve-env=A,B", "env"}, want: Request{Keep: []string{"A", "B"}, Command: []string{"env"}}},
		{args: []string{"-D", "/tmp", "pwd"}, want: Request{Chdir: "/tmp", Command: []string{"pwd"}}},
		{args: []string{"--", "-x"}, want: Request{Command: []string{"-x"}}},
		{args: []string{"sh", "-c", "echo -u"}, want: Request{Command: []string{"sh", "-c", "echo -u"}}},
		{args: []string{"DEBIAN_FRONTEND=noninteractive", "A=1=2", "apt-get", "install", "-y", "x"},
			want: Request{Assign: []string{"DEBIAN_FRONTEND=noninteractive", "A=1=2"}, Command: []string{"apt-get", "install", "-y", "x"}}},
		{args: []string{"1A=x"}, want: Request{Command: []string{"1A=x"}}},
		{args: []string{"-k"}, act: actValidate},
		{args: []string{"-v"}, act: actValidate},
		{args: []string{"-k", "true"}, want: Request{Command: []string{"true"}}},
		{args: []string{"-l"}, act: actList},
		{args: []string{"-V"}, act: actVersion},
		{args: []string{"--help"}, act: actHelp},
		{args: nil, err: ""},
		{args: []string{"-x", "id"}, err: "sudo: invalid option -- 'x'"},
		{args: []string{"--frobnicate", "id"}, err: "sudo: unrecognized option '--frobnicate'"},
		{args: []string{"-u"}, err: "sudo: option requires an argument -- 'u'"},
		{args: []string{"--user"}, err: "sudo: option '--user' requires an argument"},
		{args: []string{"-g", "adm", "id"}, err: "sudo: option -g is not supported in a Lizard sandbox"},
		{args: []string{"-i", "-s"}, err: "sudo: you may not specify both the -i and -s options"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, act, err := parse(tc.args)
			var ue usageError
			if tc.err != "" || tc.args == nil {
				if err == nil {
					t.Fatalf("parse(%q) = %+v, want usage error %q", tc.args, got, tc.err)
				}
				if !asUsage(err, &ue) || !strings.HasPrefix(ue.msg, tc.err) {
					t.Fatalf("parse(%q) error = %v, want %q", tc.args, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tc.args, err)
			}
			if act != tc.act {
				t.Errorf("parse(%q) action = %d, want %d", tc.args, act, tc.act)
			}
			if tc.act == actRun && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parse(%q) = %+v, want %+v", tc.args, got, tc.want)
			}
		})
	}
}

func asUsage(err error, ue *usageError) bool {
	e, ok := err.(usageError)
	*ue = e
	return ok
}

// TestWireRoundTrip fails when a field of the wire types is not carried
// (a field added without a JSON name, or one the other side drops).
func TestWireRoundTrip(t *testing.T) {
	seven := 7
	for _, v := range []any{
		&Request{Command: []string{"id"}, User: "u", Login: true, Shell: true, PreserveEnv: true, Keep: []string{"K"},
			SetHome: true, Assign: []string{"A=1"}, Chdir: "/d", Env: []string{"E=1"}, Cwd: "/c", TTY: [3]bool{true, true, true}, Rows: 1, Cols: 2},
		&Reply{Error: "e", Started: true, Exit: &seven, Signal: 9},
		&Forward{Signal: 15},
	} {
		rv := reflect.ValueOf(v).Elem()
		for i := 0; i < rv.NumField(); i++ {
			if rv.Field(i).IsZero() {
				t.Fatalf("%T.%s is zero in the test: set it", v, rv.Type().Field(i).Name)
			}
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		back := reflect.New(rv.Type())
		if err := json.Unmarshal(b, back.Interface()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Elem().Interface(), rv.Interface()) {
			t.Errorf("%T round trip = %+v, want %+v", v, back.Elem().Interface(), rv.Interface())
		}
	}
}

func TestPlan(t *testing.T) {
	caller := account{name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash"}
	root := account{name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash"}
	env := []string{"TERM=xterm", "FOO=bar", "HOME=/home/user", "PATH=/opt/venv/bin:/usr/bin", "LC_ALL=C.UTF-8", "SHELL=/bin/zsh"}
	for _, tc := range []struct {
		name     string
		req      Request
		path     string
		argv     []string
		dir      string
		has, not []string // environment entries the command has, and names it must not have
		err      string
	}{
		{name: "env reset", req: Request{Command: []string{"sh", "-c", "x"}, Env: env, Cwd: "/home/user"},
			path: "/usr/bin/sh", argv: []string{"sh", "-c", "x"}, dir: "/home/user",
			has: []string{"TERM=xterm", "LC_ALL=C.UTF-8", "HOME=/root", "USER=root", "LOGNAME=root", "PATH=" + securePath,
				"SUDO_USER=user", "SUDO_UID=1000", "SUDO_GID=1000", "SUDO_COMMAND=/usr/bin/sh -c x", "SHELL=/bin/bash"},
			not: []string{"FOO"}},
		{name: "-E", req: Request{Command: []string{"env"}, Env: env, PreserveEnv: true},
			path: "/usr/bin/env", argv: []string{"env"}, dir: "/", has: []string{"FOO=bar", "HOME=/home/user", "PATH=" + securePath}},
		{name: "-E -H", req: Request{Command: []string{"env"}, Env: env, PreserveEnv: true, SetHome: true},
			path: "/usr/bin/env", argv: []string{"env"}, dir: "/", has: []string{"FOO=bar", "HOME=/root"}},
		{name: "--preserve-env=FOO", req: Request{Command: []string{"env"}, Env: env, Keep: []string{"FOO"}},
			path: "/usr/bin/env", argv: []string{"env"}, dir: "/", has: []string{"FOO=bar"}},
		{name: "VAR=value", req: Request{Command: []string{"env"}, Env: env, Assign: []string{"FOO=baz", "DEBIAN_FRONTEND=noninteractive"}},
			path: "/usr/bin/env", argv: []string{"env"}, dir: "/", has: []string{"FOO=baz", "DEBIAN_FRONTEND=noninteractive"}},
		{name: "-i", req: Request{Login: true, Env: env, Cwd: "/home/user"},
			path: "/bin/bash", argv: []string{"-bash"}, dir: "/root", has: []string{"HOME=/root"}, not: []string{"FOO"}},
		{name: "-i cmd", req: Request{Login: true, Command: []string{"echo", "a b"}, Env: env, PreserveEnv: true},
			path: "/bin/bash", argv: []string{"-bash", "-c", `echo a\ b`}, dir: "/root", not: []string{"FOO"}},
		{name: "-s uses $SHELL", req: Request{Shell: true, Env: env, Cwd: "/tmp"},
			path: "/bin/zsh", argv: []string{"zsh"}, dir: "/tmp"},
		{name: "-D relative", req: Request{Command: []string{"pwd"}, Chdir: "sub", Cwd: "/home/user"},
			path: "/usr/bin/pwd", argv: []string{"pwd"}, dir: "/home/user/sub"},
		{name: "absolute command", req: Request{Command: []string{"/no/such"}},
			path: "/no/such", argv: []string{"/no/such"}, dir: "/"},
		{name: "not found", req: Request{Command: []string{"no-such-command-x"}}, err: "sudo: no-such-command-x: command not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planFor(&tc.req, caller, root)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("planFor = %v, want error %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// A command found on the host's secure path may be in /bin or /usr/bin.
			if p.path != tc.path && !(strings.HasPrefix(tc.path, "/usr/bin/") && filepath.Base(p.path) == filepath.Base(tc.path)) {
				t.Errorf("path = %s, want %s", p.path, tc.path)
			}
			if !slices.Equal(p.argv, tc.argv) || p.dir != tc.dir {
				t.Errorf("argv, dir = %q, %s; want %q, %s", p.argv, p.dir, tc.argv, tc.dir)
			}
			for _, kv := range tc.has {
				if !slices.Contains(p.env, kv) {
					t.Errorf("env lacks %s: %q", kv, p.env)
				}
			}
			for _, k := range tc.not {
				if getenv(p.env, k) != "" {
					t.Errorf("env has %s: %q", k, p.env)
				}
			}
		})
	}
}
