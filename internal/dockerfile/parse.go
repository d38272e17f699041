// Package dockerfile turns a Dockerfile and its build context into a
// custom template's recipe of ordered steps (docs/templates.md): FROM
// names the base (a Lizard template or an image), RUN, COPY/ADD, ENV,
// WORKDIR and USER become steps, ARG is substituted, CMD/ENTRYPOINT become
// the start command. What a Lizard template cannot honour (a second
// stage, HEALTHCHECK, VOLUME, ONBUILD, SHELL, STOPSIGNAL, ADD of a URL) is
// an invalid-argument error naming the line.
//
// It runs on the client (the CLI): the build context's files are read
// here, never followed outside the context, and sent as the recipe's copy
// steps, within the recipe's bounds. Nothing here runs a command: RUN
// steps run in the server's build sandbox, as every recipe's.
package dockerfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// Bounds on a Dockerfile, so that hostile input costs little.
const (
	MaxBytes        = 1 << 20  // the whole file
	MaxLineBytes    = 64 << 10 // one instruction, its continuations joined
	MaxInstructions = 1000
)

// Instruction is one instruction of a Dockerfile.
type Instruction struct {
	Line  int    // where it starts, from 1
	Cmd   string // upper case: RUN, COPY...
	Flags []string
	// Args are its words; for RUN, CMD and ENTRYPOINT in shell form, the
	// one string after the instruction (JSON is false).
	Args []string
	JSON bool // the exec (JSON array) form
	Raw  string
}

// errorf is an invalid-argument error naming line n.
func errorf(n int, format string, args ...any) error {
	return errdefs.Invalidf("Dockerfile line %d: %s", n, fmt.Sprintf(format, args...))
}

// Parse reads a Dockerfile: parser directives (escape; syntax and check
// are ignored), comments, line continuations, and each instruction's
// flags and arguments.
func Parse(data []byte) ([]Instruction, error) {
	if len(data) > MaxBytes {
		return nil, errdefs.Invalidf("the Dockerfile is %d bytes; at most %d are read", len(data), MaxBytes)
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return nil, errdefs.Invalidf("the Dockerfile holds a NUL byte: not a text file")
	}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	escape := byte('\\')
	// Parser directives: # key=value lines before anything else; the
	// first line that is not one ends them.
	i := 0
directives:
	for ; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(l, "#")), "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		switch {
		case !strings.HasPrefix(l, "#") || !ok:
			break directives
		case k == "escape":
			if v != "\\" && v != "`" {
				return nil, errorf(i+1, "escape=%s: want \\ or `", v)
			}
			escape = v[0]
		case k != "syntax" && k != "check":
			break directives // an ordinary comment
		}
	}
	var out []Instruction
	for ; i < len(lines); i++ {
		start := i
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		// Join continuations: a line ending in the escape character goes
		// on with the next; comment and empty lines inside are dropped.
		var b strings.Builder
		for {
			line := strings.TrimRightFunc(lines[i], unicode.IsSpace)
			cont := len(line) > 0 && line[len(line)-1] == escape
			if cont {
				line = line[:len(line)-1]
			}
			b.WriteString(line)
			if b.Len() > MaxLineBytes {
				return nil, errorf(start+1, "the instruction is longer than %d bytes", MaxLineBytes)
			}
			if !cont {
				break
			}
			for i++; i < len(lines); i++ {
				t := strings.TrimSpace(lines[i])
				if t != "" && !strings.HasPrefix(t, "#") {
					break
				}
			}
			if i == len(lines) {
				break
			}
		}
		in, err := instruction(start+1, strings.TrimSpace(b.String()))
		if err != nil {
			return nil, err
		}
		if len(out) == MaxInstructions {
			return nil, errorf(start+1, "the Dockerfile has more than %d instructions", MaxInstructions)
		}
		out = append(out, in)
	}
	return out, nil
}

// instruction splits one logical line.
func instruction(n int, line string) (Instruction, error) {
	cmd, rest, _ := strings.Cut(line, " ")
	if t, r, ok := strings.Cut(line, "\t"); ok && len(t) < len(cmd) {
		cmd, rest = t, r
	}
	in := Instruction{Line: n, Cmd: strings.ToUpper(cmd), Raw: line}
	rest = strings.TrimSpace(rest)
	// Flags (--name=value) lead, for the instructions that take them.
	switch in.Cmd {
	case "FROM", "RUN", "COPY", "ADD", "HEALTHCHECK":
		for strings.HasPrefix(rest, "--") {
			f, r, _ := strings.Cut(rest, " ")
			in.Flags = append(in.Flags, f)
			rest = strings.TrimSpace(r)
		}
	}
	switch in.Cmd {
	case "RUN", "CMD", "ENTRYPOINT", "COPY", "ADD", "VOLUME", "SHELL":
		if strings.HasPrefix(rest, "[") {
			var words []string
			if err := json.Unmarshal([]byte(rest), &words); err == nil {
				in.Args, in.JSON = words, true
				return in, nil
			}
			// Not a JSON array of strings: Docker takes it as the shell form.
		}
	}
	switch in.Cmd {
	case "RUN", "CMD", "ENTRYPOINT":
		if rest != "" {
			in.Args = []string{rest}
		}
		return in, nil
	}
	words, err := splitWords(rest)
	if err != nil {
		return in, errorf(n, "%s: %v", in.Cmd, err)
	}
	in.Args = words
	return in, nil
}

// splitWords splits s into words at unquoted white space; quotes group
// and are kept (unquoting follows substitution), a backslash escapes the
// next character outside single quotes.
func splitWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in := false // inside a word
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == 0 && (c == ' ' || c == '\t'):
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
			continue
		case c == '\\' && quote != '\'' && i+1 < len(s):
			w.WriteByte(c)
			i++
			c = s[i]
		case quote == 0 && (c == '"' || c == '\''):
			quote = c
		case c == quote:
			quote = 0
		}
		w.WriteByte(c)
		in = true
	}
	if quote != 0 {
		return nil, fmt.Errorf("unmatched %c quote", quote)
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}
