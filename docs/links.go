// Package docs holds sluice's own documentation (the Markdown files beside
// this one, with architecture.md as the reference) and the checks that keep
// the references to it sound: every `docs/<file>.md#<anchor>` named in Go code
// or help text, and every relative link between the Markdown files, must name
// a file that exists and a heading that exists in it (GitHub's anchor slugs).
// The guarantee it keeps is that the contract lives in the repository: code
// cites docs/architecture.md and the per-package pages, never a file outside.
package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// RefPattern matches a reference to a documentation page from code or help
// text: docs/<name>.md with an optional #anchor.
var RefPattern = regexp.MustCompile(`docs/([A-Za-z0-9_.-]+\.md)(#[\p{L}\p{N}_-]+)?`)

// Anchors returns the anchors GitHub generates for the headings of a
// Markdown document: the heading text without inline markup, lower-cased,
// every character but letters, digits, '-', '_' and spaces dropped, spaces
// turned into '-', and "-1", "-2", … appended to repeats. Lines inside
// fenced code blocks are not headings. Explicit HTML anchors
// (<a id="…"></a> or name="…") count too.
func Anchors(md []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimLeft(line, " ")
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			mark := trim[:3]
			switch {
			case !inFence:
				inFence, fence = true, mark
			case mark == fence:
				inFence = false
			}
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if len(line)-len(trim) > 3 {
			continue
		}
		level := len(trim) - len(strings.TrimLeft(trim, "#"))
		if level == 0 || level > 6 || (len(trim) > level && trim[level] != ' ') {
			continue
		}
		slug := Slug(strings.TrimSpace(strings.TrimRight(trim[level:], "# ")))
		if n, ok := seen[slug]; ok {
			seen[slug] = n + 1
			slug = fmt.Sprintf("%s-%d", slug, n+1)
		} else {
			seen[slug] = 0
		}
		out[slug] = true
	}
	return out
}

var (
	mdLink   = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]*)\)`)
	mdInline = regexp.MustCompile("`([^`]*)`")
	// htmlAnchor is an explicit anchor: <a id="x"> or <a name="x">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// Slug is GitHub's anchor for a heading text.
func Slug(heading string) string {
	h := mdLink.ReplaceAllString(heading, "$1")
	h = mdInline.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// Checker resolves references against the documents of one directory,
// reading each document once.
type Checker struct {
	Dir     string // the docs directory
	anchors map[string]map[string]bool
}

// NewChecker returns a Checker for the Markdown files in dir.
func NewChecker(dir string) *Checker {
	return &Checker{Dir: dir, anchors: map[string]map[string]bool{}}
}

// Resolve checks that file (a path relative to the checker's directory, as
// a link from one of its documents would write it) exists and, when anchor
// is not empty (without its '#'), that it names a heading of that Markdown
// file. An anchor ending in '-' is a template (code that appends a name, as
// "operations.md#alert-" + alert): it resolves when some anchor starts with
// it.
func (c *Checker) Resolve(file, anchor string) error {
	path := filepath.Join(c.Dir, filepath.FromSlash(file))
	if file == "" {
		return fmt.Errorf("empty file in reference")
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("docs reference %q: %w", file, err)
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(path, ".md") {
		return fmt.Errorf("docs reference %s#%s: anchor into a file that is not Markdown", file, anchor)
	}
	a, ok := c.anchors[path]
	if !ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("docs reference %q: %w", file, err)
		}
		a = Anchors(b)
		c.anchors[path] = a
	}
	if strings.HasSuffix(anchor, "-") {
		for k := range a {
			if strings.HasPrefix(k, anchor) {
				return nil
			}
		}
	} else if a[anchor] {
		return nil
	}
	return fmt.Errorf("docs reference %s#%s: no heading with that anchor", file, anchor)
}

// CheckText returns one error per reference in text (Go source or help
// text) that does not resolve; RefPattern finds them.
func (c *Checker) CheckText(text string) []error {
	var errs []error
	for _, m := range RefPattern.FindAllStringSubmatch(text, -1) {
		if err := c.Resolve(m[1], strings.TrimPrefix(m[2], "#")); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// CheckMarkdown returns one error per relative link of the Markdown document
// name (in the checker's directory) that does not resolve: a missing file, or
// an anchor that is not a heading of its target. Links to other schemes and
// links inside code are not checked.
func (c *Checker) CheckMarkdown(name string) ([]error, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	var errs []error
	inFence := false
	for i, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimLeft(line, " "); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = mdInline.ReplaceAllString(line, "")
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			target := m[2]
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			if file == "" {
				file = name
			}
			if err := c.Resolve(file, anchor); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %w", name, i+1, err))
			}
		}
	}
	return errs, nil
}
