package secrets

import (
	"errors"
	"regexp"
	"strings"
)

// A header value in a policy's inject rule is a template: text with
// {{ secrets.NAME }} where the named secret's value goes, such as
// "Bearer {{ secrets.OPENAI_API_KEY }}". Nothing else is expanded: no
// functions, no other variables, no escapes.
var refRE = regexp.MustCompile(`\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]{0,127})\s*\}\}`)

// Refs returns the names template refers to, in order (repeats
// included), and refuses braces that are not a reference.
func Refs(template string) ([]string, error) {
	var names []string
	for _, m := range refRE.FindAllStringSubmatch(template, -1) {
		names = append(names, m[1])
	}
	if rest := refRE.ReplaceAllString(template, ""); strings.Contains(rest, "{{") || strings.Contains(rest, "}}") {
		return nil, errors.New("holds {{ or }} that is not a reference: want {{ secrets.NAME }}, NAME a letter or '_' then letters, digits or '_'")
	}
	return names, nil
}

// Expand returns template with each reference replaced by value(name).
// The first error of value is returned as it is.
func Expand(template string, value func(name string) (string, error)) (string, error) {
	var err error
	out := refRE.ReplaceAllStringFunc(template, func(m string) string {
		if err != nil {
			return ""
		}
		v, verr := value(refRE.FindStringSubmatch(m)[1])
		if verr != nil {
			err = verr
			return ""
		}
		return v
	})
	if err != nil {
		return "", err
	}
	return out, nil
}
