package dockerfile

import (
	"fmt"
	"strings"
)

// expand substitutes variables in word and removes its quotes, as Docker
// does for the arguments of FROM, COPY, ADD, ENV, ARG, WORKDIR and USER:
// $NAME, ${NAME}, ${NAME:-word}, ${NAME-word}, ${NAME:+word},
// ${NAME+word}; nothing inside single quotes; a backslash escapes the
// next character. An unset variable is empty.
func expand(word string, lookup func(string) (string, bool)) (string, error) {
	var out strings.Builder
	var quote byte
	for i := 0; i < len(word); i++ {
		c := word[i]
		switch {
		case c == '\'' && quote != '"':
			if quote == '\'' {
				quote = 0
			} else {
				quote = '\''
			}
		case c == '"' && quote != '\'':
			if quote == '"' {
				quote = 0
			} else {
				quote = '"'
			}
		case c == '\\' && quote != '\'' && i+1 < len(word):
			i++
			out.WriteByte(word[i])
		case c == '$' && quote != '\'' && i+1 < len(word):
			v, n, err := variable(word[i+1:], lookup)
			if err != nil {
				return "", err
			}
			if n == 0 {
				out.WriteByte(c)
				continue
			}
			out.WriteString(v)
			i += n
		default:
			out.WriteByte(c)
		}
	}
	if quote != 0 {
		return "", fmt.Errorf("unmatched %c quote in %q", quote, word)
	}
	return out.String(), nil
}

func isNameByte(c byte, first bool) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

// variable reads the variable reference at the start of s (after its $)
// and returns its value and how many bytes it took (0: none, a lone $).
func variable(s string, lookup func(string) (string, bool)) (string, int, error) {
	if s[0] != '{' {
		n := 0
		for n < len(s) && isNameByte(s[n], n == 0) {
			n++
		}
		if n == 0 {
			return "", 0, nil
		}
		v, _ := lookup(s[:n])
		return v, n, nil
	}
	end, depth := -1, 0
	for i := 0; i < len(s) && end < 0; i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				end = i
			}
		}
	}
	if end < 0 {
		return "", 0, fmt.Errorf("unterminated ${ in %q", "$"+s)
	}
	body := s[1:end]
	n := 0
	for n < len(body) && isNameByte(body[n], n == 0) {
		n++
	}
	if n == 0 {
		return "", 0, fmt.Errorf("bad substitution ${%s}", body)
	}
	name, op := body[:n], body[n:]
	v, set := lookup(name)
	var word string
	switch {
	case op == "":
		return v, end + 1, nil
	case strings.HasPrefix(op, ":-"), strings.HasPrefix(op, ":+"):
		word, op = op[2:], op[:2]
	case strings.HasPrefix(op, "-"), strings.HasPrefix(op, "+"):
		word, op = op[1:], op[:1]
	default:
		return "", 0, fmt.Errorf("unsupported substitution ${%s}: want ${%s}, ${%s:-default} or ${%s:+alternative}", body, name, name, name)
	}
	w, err := expand(word, lookup)
	if err != nil {
		return "", 0, err
	}
	switch op {
	case ":-":
		if v == "" {
			v = w
		}
	case "-":
		if !set {
			v = w
		}
	case ":+":
		if v != "" {
			v = w
		}
	case "+":
		if set {
			v = w
		}
	}
	return v, end + 1, nil
}
