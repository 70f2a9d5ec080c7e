// Command goproxy makes a Go module proxy folder (GOPROXY=file://DIR) out
// of Go sources laid out by import path (Debian's /usr/share/gocode/src,
// and tinysecurity's installed share/gocode/src), so that a program in
// module mode builds offline against them.  Every module@version that a
// go.mod of the graph names is served with the one copy of that module
// the source folders hold (the version is a label: Debian packages one
// version of each module); a module no folder holds gets a go.mod of its
// own and no code, which is enough while nothing imports it.
//
//	go run ./scripts/goproxy -out DIR -src /usr/share/gocode/src \
//		-src PREFIX/share/gocode/src tinysecurity.dev/tsecstorage@v0.1.0
package main

import (
	"archive/zip"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type srcs []string

func (s *srcs) String() string     { return strings.Join(*s, ",") }
func (s *srcs) Set(v string) error { *s = append(*s, v); return nil }

// escape is the proxy's case encoding of a module path ("!x" for "X").
func escape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// requires reads the module@version pairs a go.mod requires.
func requires(mod string) [][2]string {
	var out [][2]string
	block := false
	for _, line := range strings.Split(mod, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		switch {
		case line == "require (":
			block = true
			continue
		case block && line == ")":
			block = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimSpace(strings.TrimPrefix(line, "require "))
		case !block:
			continue
		}
		if f := strings.Fields(line); len(f) == 2 {
			out = append(out, [2]string{strings.Trim(f[0], `"`), strings.Trim(f[1], `"`)})
		}
	}
	return out
}

// zipModule writes dir's files as module m at version v, leaving out
// nested modules, vendor folders and anything but regular files.
func zipModule(w io.Writer, dir, m, v string) error {
	z := zip.NewWriter(w)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			if p != dir && (fi.Name() == "vendor" || fi.Name() == ".git" ||
				exists(filepath.Join(p, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		st, err := os.Stat(p) // through a link, as the files' owner meant
		if err != nil || !st.Mode().IsRegular() {
			return nil
		}
		f, err := z.Create(m + "@" + v + "/" + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		r, err := os.Open(p)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(f, r)
		return err
	})
	if err != nil {
		return err
	}
	return z.Close()
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func main() {
	var roots srcs
	out := flag.String("out", "", "the proxy folder to make")
	flag.Var(&roots, "src", "a source folder by import path (again for more)")
	flag.Parse()
	if *out == "" || len(roots) == 0 || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: goproxy -out DIR -src SRC... MODULE@VERSION...")
		os.Exit(2)
	}
	var queue [][2]string
	for _, a := range flag.Args() {
		m, v, ok := strings.Cut(a, "@")
		if !ok {
			fmt.Fprintf(os.Stderr, "goproxy: %q is not MODULE@VERSION\n", a)
			os.Exit(2)
		}
		queue = append(queue, [2]string{m, v})
	}
	seen := map[string]bool{}
	versions := map[string][]string{}
	for len(queue) > 0 {
		m, v := queue[0][0], queue[0][1]
		queue = queue[1:]
		if seen[m+"@"+v] {
			continue
		}
		seen[m+"@"+v] = true
		versions[m] = append(versions[m], v)
		base := filepath.Join(*out, escape(m), "@v")
		if err := os.MkdirAll(base, 0o755); err != nil {
			fail(err)
		}
		dir := ""
		for _, r := range roots {
			if exists(filepath.Join(r, m)) {
				dir = filepath.Join(r, m)
				break
			}
		}
		mod := "module " + m + "\n"
		if dir != "" {
			if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
				mod = string(b)
			}
		}
		write(filepath.Join(base, v+".mod"), []byte(mod))
		write(filepath.Join(base, v+".info"), []byte(fmt.Sprintf(`{"Version":%q}`, v)))
		if dir != "" {
			f, err := os.Create(filepath.Join(base, v+".zip"))
			if err != nil {
				fail(err)
			}
			if err := zipModule(f, dir, m, v); err != nil {
				fail(err)
			}
			f.Close()
		}
		queue = append(queue, requires(mod)...)
	}
	for m, vs := range versions {
		sort.Strings(vs)
		write(filepath.Join(*out, escape(m), "@v", "list"), []byte(strings.Join(vs, "\n")+"\n"))
	}
	fmt.Printf("goproxy: %d module versions in %s\n", len(seen), *out)
}

func write(p string, b []byte) {
	if err := os.WriteFile(p, b, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "goproxy:", err)
	os.Exit(1)
}
