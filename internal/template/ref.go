package template

import "strings"

// A template reference is what a sandbox, a snapshot or the warm pool
// records as its template: a built-in template's name ("interpreter"), or a
// custom template's name and the key of the build it boots from,
// "NAME@KEY". The key pins the build, so a rebuild under the same name never
// changes what a running or paused sandbox boots from.

// Ref is the reference to custom template name's build key.
func Ref(name, key string) string { return name + "@" + key }

// SplitRef splits a Ref; ok is false for built-in template names.
func SplitRef(ref string) (name, key string, ok bool) {
	name, key, ok = strings.Cut(ref, "@")
	return name, key, ok && key != ""
}

// Name is what the API shows of a template reference: a custom
// template's name without its key.
func Name(ref string) string {
	name, _, _ := strings.Cut(ref, "@")
	return name
}
