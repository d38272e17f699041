package dockerfile

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// MaxFileBytes is what a recipe's files may hold in all (recipe.MaxFileBytes,
// which the server checks; a test keeps them equal): the context's files a
// Dockerfile copies are counted as they are read, so that a huge context
// fails here, early, naming the bound.
const MaxFileBytes = 16 << 20

// MaxFiles is recipe.MaxFiles, counted the same way.
const MaxFiles = 10000

// Context is a build context: the directory COPY and ADD read from, with
// its .dockerignore. Nothing outside it is read: a source that leaves it
// (../, or a symbolic link on the way that points out) is refused, and the
// symbolic links inside a copied directory are copied as links, never
// followed.
type Context struct {
	root   string // resolved: no symbolic link in it
	ignore []ignorePattern
	bytes  int
	files  int
}

// Entry is one thing a COPY copies: a regular file's content and mode, or
// a symbolic link's target (Link).
type Entry struct {
	Rel  string // from the source: "" for a file named by the source itself
	Data []byte
	Mode fs.FileMode
	Link string
}

type ignorePattern struct {
	re     *regexp.Regexp
	negate bool
}

// OpenContext opens directory dir as a build context, reading its
// .dockerignore.
func OpenContext(dir string) (*Context, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("opening the build context: %w", err)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("the build context %s is not a directory", dir)
	}
	c := &Context{root: root}
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading .dockerignore: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		p := ignorePattern{}
		if strings.HasPrefix(l, "!") {
			p.negate, l = true, strings.TrimSpace(l[1:])
		}
		l = strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(l)), "/")
		re, err := globRegexp(l)
		if err != nil {
			return nil, fmt.Errorf(".dockerignore pattern %q: %w", l, err)
		}
		p.re = re
		c.ignore = append(c.ignore, p)
	}
	return c, nil
}

// globRegexp turns a .dockerignore pattern (filepath.Match's, with ** for
// any number of directories) into a regular expression.
func globRegexp(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			if i+1 < len(p) && p[i+1] == '*' {
				i++
				if i+1 < len(p) && p[i+1] == '/' {
					i++
					b.WriteString("(.*/)?")
				} else {
					b.WriteString(".*")
				}
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		case '[':
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unterminated [")
			}
			class := p[i+1 : i+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + class + "]")
			i += end
		case '\\':
			if i+1 < len(p) {
				i++
				b.WriteString(regexp.QuoteMeta(string(p[i])))
			}
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// ignored reports whether rel (slash-separated, from the context's root)
// is left out by .dockerignore: the last pattern matching it, or one of
// its parent directories, decides.
func (c *Context) ignored(rel string) bool {
	out := false
	for _, p := range c.ignore {
		for q := rel; q != "." && q != ""; q = path.Dir(q) {
			if p.re.MatchString(q) {
				out = !p.negate
				break
			}
		}
	}
	return out
}

// Entries reads what source src (relative to the context; globs allowed)
// names: a file, or a directory's tree (its files and symbolic links, the
// directory's own name left out, as COPY does). dir is true when src
// named a directory or a glob, whose entries go into the destination
// directory. line names the instruction in errors.
func (c *Context) Entries(line int, src string) (entries []Entry, dir bool, err error) {
	rel, err := c.inside(line, src, filepath.Join(c.root, filepath.FromSlash(src)))
	if err != nil {
		return nil, false, err
	}
	if strings.ContainsAny(src, "*?[") {
		matches, err := filepath.Glob(filepath.Join(c.root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, false, errorf(line, "COPY %s: %v", src, err)
		}
		for _, m := range matches {
			r, _ := filepath.Rel(c.root, m)
			got, isDir, err := c.Entries(line, filepath.ToSlash(r))
			if err != nil {
				return nil, false, err
			}
			for _, e := range got {
				if !isDir {
					e.Rel = path.Base(r) // a file the glob matched keeps its name
				}
				entries = append(entries, e)
			}
		}
		if len(matches) == 0 {
			return nil, false, errorf(line, "COPY %s: no file of the build context matches it", src)
		}
		return entries, true, nil
	}
	if c.ignored(rel) && rel != "." {
		return nil, false, errorf(line, "COPY %s: the build context's .dockerignore leaves it out", src)
	}
	// The source itself may be a link: followed, it must stay inside.
	full, err := filepath.EvalSymlinks(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, false, errorf(line, "COPY %s: not in the build context %s", src, c.root)
	}
	if _, err := c.inside(line, src, full); err != nil {
		return nil, false, err
	}
	fi, err := os.Lstat(full)
	if err != nil {
		return nil, false, errorf(line, "COPY %s: %v", src, err)
	}
	if !fi.IsDir() {
		e, err := c.read(line, src, full, fi)
		return []Entry{e}, false, err
	}
	err = filepath.WalkDir(full, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return errorf(line, "COPY %s: %v", src, err)
		}
		fromRoot, _ := filepath.Rel(c.root, p)
		if p != full && c.ignored(filepath.ToSlash(fromRoot)) {
			if d.IsDir() && !c.negations() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return errorf(line, "COPY %s: %v", src, err)
		}
		e, err := c.read(line, src, p, fi)
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(full, p)
		e.Rel = filepath.ToSlash(r)
		entries = append(entries, e)
		return nil
	})
	return entries, true, err
}

// negations reports whether .dockerignore has ! patterns, which may bring
// back a file inside an ignored directory: the walk must then enter it.
func (c *Context) negations() bool {
	for _, p := range c.ignore {
		if p.negate {
			return true
		}
	}
	return false
}

// inside returns p's path from the context's root (slash-separated),
// refusing one outside it.
func (c *Context) inside(line int, src, p string) (string, error) {
	rel, err := filepath.Rel(c.root, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", errorf(line, "COPY %s: outside the build context %s (a source is a path inside it; a symbolic link is not followed out of it)", src, c.root)
	}
	return filepath.ToSlash(rel), nil
}

// read reads one file or symbolic link (never followed), counting it
// against the bounds.
func (c *Context) read(line int, src, p string, fi fs.FileInfo) (Entry, error) {
	c.files++
	if c.files > MaxFiles {
		return Entry{}, errorf(line, "COPY %s: the Dockerfile copies more than %d files (a recipe's bound); leave some out with .dockerignore", src, MaxFiles)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return Entry{}, errorf(line, "COPY %s: %v", src, err)
		}
		return Entry{Link: target}, nil
	case fi.Mode().IsRegular():
		c.bytes += int(fi.Size())
		if c.bytes > MaxFileBytes {
			return Entry{}, errorf(line, "COPY %s: the Dockerfile copies more than %d MiB from the build context (a recipe's bound); leave large data out with .dockerignore and fetch it at run time", src, MaxFileBytes>>20)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return Entry{}, errorf(line, "COPY %s: %v", src, err)
		}
		return Entry{Data: data, Mode: fi.Mode().Perm()}, nil
	}
	return Entry{}, errorf(line, "COPY %s: %s is a %s: only files, directories and symbolic links are copied", src, p, fi.Mode().Type())
}
