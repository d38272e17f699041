package template

import "testing"

func TestRefs(t *testing.T) {
	ref := Ref("my-tpl", "0123456789abcdef")
	if name, key, ok := SplitRef(ref); !ok || name != "my-tpl" || key != "0123456789abcdef" || Name(ref) != "my-tpl" {
		t.Errorf("SplitRef(%q) = %q, %q, %v; Name = %q", ref, name, key, ok, Name(ref))
	}
	for _, builtin := range []string{"interpreter", "desktop", "x@"} {
		if _, _, ok := SplitRef(builtin); ok {
			t.Errorf("SplitRef(%q) is a reference; want a built-in name", builtin)
		}
	}
	if Name("interpreter") != "interpreter" {
		t.Errorf("Name(interpreter) = %q", Name("interpreter"))
	}
}
