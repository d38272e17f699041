package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/daemon"
)

// TestDocsCommands checks every `lizard ...` command line in README.md and
// docs/ (fenced blocks and inline code) against the CLI: its command and
// subcommands exist, and each flag it passes is one that command's -h lists.
// A new user copies these lines; a renamed flag must fail here, not there.
func TestDocsCommands(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../sdk/typescript/README.md", "../../deploy/helm/lizard/README.md")
	h := helper{t: t, help: map[string]string{}}
	top := h.helpOf(nil)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range codeLines(string(b)) {
			for _, m := range lizardCall.FindAllStringSubmatchIndex(line, -1) {
				cmdLine := line[m[1]:]
				if i := strings.IndexAny(cmdLine, ";|&)#"); i >= 0 {
					cmdLine = cmdLine[:i] // the command's own end, or a comment
				}
				words := shellWords(cmdLine)
				if len(words) == 0 || !strings.Contains(top, "\n  "+words[0]+" ") {
					if m[2] >= 0 { // bin/lizard: meant as this program
						t.Errorf("%s: %q: lizard has no command %q", f, strings.TrimSpace(line), firstOr(words))
					}
					continue // prose or another program's arguments (kubectl -n lizard ...)
				}
				path := []string{words[0]}
				rest := words[1:]
				for len(rest) > 0 && subcommand.MatchString(rest[0]) && h.lists(path, rest[0]) {
					path = append(path, rest[0])
					rest = rest[1:]
				}
				help := h.helpOf(path)
				if len(rest) > 0 && strings.Contains(help, "Usage: lizard "+strings.Join(path, " ")+" COMMAND") {
					t.Errorf("%s: %q: `lizard %s` has no command %q", f, strings.TrimSpace(line), strings.Join(path, " "), firstOr(rest))
					continue
				}
				for _, w := range rest {
					if w == "--" {
						break // the program it runs
					}
					fm := flagWord.FindStringSubmatch(w)
					if fm == nil {
						continue
					}
					checked++
					if fm[1] == "h" || fm[1] == "help" {
						continue
					}
					if !strings.Contains(help, "\n  -"+fm[1]+" ") && !strings.Contains(help, "\n  -"+fm[1]+"\n") &&
						!strings.Contains(help, "--"+fm[1]) {
						t.Errorf("%s: %q: `lizard %s` has no flag --%s", f, strings.TrimSpace(line), strings.Join(path, " "), fm[1])
					}
				}
			}
		}
	}
	t.Logf("checked %d flags", checked)
	if checked < 50 {
		t.Errorf("checked %d flags in the docs; the extraction is broken", checked)
	}
}

// shellWords splits a command line into words as a shell would, a quoted
// string being one word (`--ready 'curl -sf x'` passes one flag, not two).
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

var (
	// lizardCall is the program's name where a command line names it.
	lizardCall = regexp.MustCompile(`(?:^|[\s(` + "`" + `])(bin/)?lizard\s+`)
	subcommand = regexp.MustCompile(`^[a-z][a-z-]*$`)
	flagWord   = regexp.MustCompile(`^\[?--?([a-z][a-z0-9-]*)`)
	fence      = regexp.MustCompile("^\\s*```")
	inline     = regexp.MustCompile("`([^`]+)`")
)

// codeLines returns the lines of fenced blocks (a trailing backslash joins
// the next line) and the inline code spans of the others.
func codeLines(md string) []string {
	var out []string
	inFence, cont := false, ""
	for _, l := range strings.Split(md, "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if inFence {
			if strings.HasSuffix(l, "\\") {
				cont += strings.TrimSuffix(l, "\\") + " "
				continue
			}
			out = append(out, cont+l)
			cont = ""
			continue
		}
		for _, m := range inline.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

type helper struct {
	t    *testing.T
	help map[string]string
}

// helpOf is what `lizard PATH... -h` prints, on stdout and stderr.
func (h helper) helpOf(path []string) string {
	k := strings.Join(path, " ")
	if s, ok := h.help[k]; ok {
		return s
	}
	var out bytes.Buffer
	args := append(append([]string{}, path...), "-h")
	if len(path) == 0 {
		args = []string{"help"}
	}
	if err := cli.Run(context.Background(), args, &out, &out, daemon.Commands()...); err != nil {
		h.t.Fatalf("lizard %s: %v", strings.Join(args, " "), err)
	}
	s := "\n" + out.String()
	h.help[k] = s
	return s
}

// lists reports whether PATH's help names the subcommand word, as
// "lizard PATH WORD" followed by its arguments or the line's end.
func (h helper) lists(path []string, word string) bool {
	name := regexp.QuoteMeta("lizard " + strings.Join(append(path, word), " "))
	return regexp.MustCompile(name + `(?:[\s\x60]|$)`).MatchString(h.helpOf(path))
}

func firstOr(w []string) string {
	if len(w) == 0 {
		return ""
	}
	return w[0]
}
