package sudo

import (
	"fmt"
	"strings"
)

// action is what a command line asks for besides running a command.
type action int

const (
	actRun      action = iota
	actHelp            // -h: usage on stdout, 0
	actVersion         // -V
	actList            // -l: what the caller may run
	actValidate        // -v, -k or -K alone: nothing to do, 0
)

// usage is sudo's own, less the options a sandbox has no use for.
const usage = `usage: sudo -h | -K | -k | -V
usage: sudo -v [-knS] [-u user]
usage: sudo -l [-knS] [-u user] [command [arg ...]]
usage: sudo [-EHknS] [-D directory] [-u user] [VAR=value] [-i | -s] [command [arg ...]]
`

// usageError is a command line sudo refuses: its message, then usage,
// on stderr, and exit status 1, as sudo does.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// parse reads sudo's options as E2B's code uses them (getopt style: -iu
// root, -uroot, --user=root, --) and the VAR=value words after them. The
// rest is the command. Options sudo has that a sandbox has no use for
// (-g, -b, -C, -p, -r, -t, -U, -T, -a, -c, -e) are refused naming the
// option, as are unknown ones.
func parse(args []string) (Request, action, error) {
	var r Request
	act := actRun
	validate := false
	i := 0
	value := func(opt string, rest string) (string, error) {
		if rest != "" {
			return rest, nil
		}
		if i+1 >= len(args) {
			return "", usageError{fmt.Sprintf("sudo: option requires an argument -- '%s'", opt)}
		}
		i++
		return args[i], nil
	}
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		if strings.HasPrefix(a, "--") {
			var err error
			if i, err = parseLong(args, i, &r, &act, &validate); err != nil {
				return r, 0, err
			}
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j : j+1]
			var err error
			switch c {
			case "u":
				r.User, err = value(c, a[j+1:])
				j = len(a)
			case "D":
				r.Chdir, err = value(c, a[j+1:])
				j = len(a)
			case "i":
				r.Login = true
			case "s":
				r.Shell = true
			case "E":
				r.PreserveEnv = true
			case "H":
				r.SetHome = true
			case "n", "S", "A", "P":
				// No password is ever asked, so there is nothing to read
				// from stdin (-S) or an askpass (-A) and nothing to refuse
				// to prompt for (-n); -P keeps the target's groups, which
				// is all a sandbox's users have.
			case "k", "K", "v":
				validate = true
			case "h":
				act = actHelp
			case "V":
				act = actVersion
			case "l":
				act = actList
			case "g", "b", "C", "p", "r", "t", "U", "T", "a", "c", "e", "R", "B", "N":
				return r, 0, usageError{fmt.Sprintf("sudo: option -%s is not supported in a Lizard sandbox (sudo there takes -u, -i, -s, -E, -H, -D, -n, -S, -k, -v, -l)", c)}
			default:
				return r, 0, usageError{fmt.Sprintf("sudo: invalid option -- '%s'", c)}
			}
			if err != nil {
				return r, 0, err
			}
		}
	}
	for ; i < len(args); i++ {
		k, _, ok := strings.Cut(args[i], "=")
		if !ok || !envName(k) {
			break
		}
		r.Assign = append(r.Assign, args[i])
	}
	if i < len(args) {
		r.Command = args[i:]
	}
	if r.Login && r.Shell {
		return r, 0, usageError{"sudo: you may not specify both the -i and -s options"}
	}
	if act == actRun && len(r.Command) == 0 && !r.Login && !r.Shell {
		if validate {
			return r, actValidate, nil
		}
		return r, 0, usageError{""}
	}
	return r, act, nil
}

// parseLong reads the long option args[i] into r (and act, validate),
// returning the index of the last argument it took.
func parseLong(args []string, i int, r *Request, act *action, validate *bool) (int, error) {
	name, val, hasVal := strings.Cut(args[i][2:], "=")
	long := func() (string, error) {
		if hasVal {
			return val, nil
		}
		if i+1 >= len(args) {
			return "", usageError{fmt.Sprintf("sudo: option '--%s' requires an argument", name)}
		}
		i++
		return args[i], nil
	}
	var err error
	switch name {
	case "user":
		r.User, err = long()
	case "chdir":
		r.Chdir, err = long()
	case "login":
		r.Login = true
	case "shell":
		r.Shell = true
	case "preserve-env":
		if hasVal {
			r.Keep = append(r.Keep, strings.Split(val, ",")...)
		} else {
			r.PreserveEnv = true
		}
	case "set-home":
		r.SetHome = true
	case "non-interactive", "stdin":
	case "validate", "reset-timestamp", "remove-timestamp":
		*validate = true
	case "help":
		*act = actHelp
	case "version":
		*act = actVersion
	case "list":
		*act = actList
	default:
		return i, usageError{fmt.Sprintf("sudo: unrecognized option '--%s'", name)}
	}
	return i, err
}

// envName reports whether s may name an environment variable in a
// VAR=value word.
func envName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
