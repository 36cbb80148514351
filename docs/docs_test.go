// Package docs holds no code: its tests check the repository's documents.
//
// Docs describe the system as it is, so a reader who picks the project up
// must be able to follow every reference:
//
//   - TestNoWorkPeriodNames: no .go, .md or .sh file names a work period;
//     history is keyed by date and commit (docs/history.md);
//   - TestHeadingReferencesResolve: every reference to a section of a
//     document, as comments and docs write them (docs/protocol.md,
//     "Owners"; docs/scaling.md ("What one message costs"); markdown
//     links to file.md#anchor), names
//     a heading that exists, and a rule it cites ("Owners", rule O3) is
//     defined in that section;
//   - TestRelativeLinksResolve: every relative markdown link points to a
//     file that exists.
//
// Each failure names the file and line of the reference.
package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root returns the repository's top directory (the test runs in docs/).
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("%s is not the repository's top directory: %v", dir, err)
	}
	return dir
}

// files returns the repository's files with one of exts, relative to top,
// skipping hidden directories and run directories.
func files(t *testing.T, top string, exts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != top && (strings.HasPrefix(name, ".") || name == "gossiptrain-runs" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(exts, filepath.Ext(name)) {
			rel, err := filepath.Rel(top, path)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no %v files under %s", exts, top)
	}
	return out
}

func read(t *testing.T, top, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(top, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lineOf returns the 1-based line of byte offset off in s.
func lineOf(s string, off int) int {
	return strings.Count(s[:off], "\n") + 1
}

// workPeriod matches the name of a work period: the word stop and a
// number, or the current one by "this". The repository keys its history by
// date and commit instead. (The pattern is built in two parts so that this
// file does not match it.)
var workPeriod = regexp.MustCompile(`(?i)\bstops? [0-9]+|\bthis ` + `stop\b`)

func TestNoWorkPeriodNames(t *testing.T) {
	top := root(t)
	for _, rel := range files(t, top, ".go", ".md", ".sh") {
		sc := bufio.NewScanner(strings.NewReader(read(t, top, rel)))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			if m := workPeriod.FindString(sc.Text()); m != "" {
				t.Errorf("%s:%d: names a work period (%q): key it by date and commit (docs/history.md), or state the rule and the test that pins it", rel, n, m)
			}
		}
	}
}

// heading is a markdown heading: its text, level, anchor and the rules
// defined in its section (bullets that start with a bold rule ID).
type heading struct {
	text   string
	level  int
	anchor string
	line   int
	rules  map[string]bool
}

var (
	atxHeading = regexp.MustCompile(`^(#{1,6})[ \t]+(.+?)[ \t#]*$`)
	// A rule is defined by a bullet that starts with its bold ID: "- **O3
	// Sync apply.**" or "- **O3** …".
	ruleDef = regexp.MustCompile(`^[ \t]*[-*][ \t]+\*\*([A-Z]{1,2}[0-9]+)\b`)
)

// headings parses a markdown document's headings, outside fenced code
// blocks, with GitHub's anchors (duplicates get -1, -2, …) and the rules
// each section defines (a section runs to the next heading of its level
// or above; a rule counts for every enclosing section).
func headings(doc string) []*heading {
	var hs []*heading
	seen := map[string]int{}
	fence := ""
	var open []*heading // enclosing sections, outermost first
	for i, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			h := &heading{text: m[2], level: len(m[1]), line: i + 1, rules: map[string]bool{}}
			slug := slugify(m[2])
			if n := seen[slug]; n > 0 {
				h.anchor = slug + "-" + strconv.Itoa(n)
			} else {
				h.anchor = slug
			}
			seen[slug]++
			hs = append(hs, h)
			for len(open) > 0 && open[len(open)-1].level >= h.level {
				open = open[:len(open)-1]
			}
			open = append(open, h)
			continue
		}
		if m := ruleDef.FindStringSubmatch(line); m != nil {
			for _, h := range open {
				h.rules[m[1]] = true
			}
		}
	}
	return hs
}

// slugify is GitHub's anchor for a heading: lower case, markup and
// punctuation dropped, spaces as hyphens.
func slugify(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// plain is a heading's or reference's text for comparison: no markup, one
// case.
func plain(s string) string {
	s = strings.NewReplacer("`", "", "*", "").Replace(s)
	return strings.ToLower(strings.TrimSpace(s))
}

// docs caches the parsed documents by path relative to the top.
type docs struct {
	t   *testing.T
	top string
	hs  map[string][]*heading
}

func (d *docs) headings(rel string) ([]*heading, bool) {
	if hs, ok := d.hs[rel]; ok {
		return hs, true
	}
	b, err := os.ReadFile(filepath.Join(d.top, filepath.FromSlash(rel)))
	if err != nil {
		return nil, false
	}
	d.hs[rel] = headings(string(b))
	return d.hs[rel], true
}

// resolve finds the document a reference in file from names: relative to
// from's directory, to the top, or to docs/ (comments write
// "contracts.md" for docs/contracts.md). It returns "" when none exists.
func (d *docs) resolve(from, name string) string {
	for _, c := range []string{
		filepath.ToSlash(filepath.Join(filepath.Dir(from), name)),
		filepath.ToSlash(filepath.Clean(name)),
		"docs/" + filepath.ToSlash(filepath.Clean(name)),
	} {
		if fi, err := os.Stat(filepath.Join(d.top, filepath.FromSlash(c))); err == nil && !fi.IsDir() {
			return c
		}
	}
	return ""
}

var (
	// A document, then a quoted section: `docs/protocol.md, "Owners"`,
	// `(docs/protocol.md "Handoff")`, `docs/scaling.md ("Memory: a model
	// larger than a peer's share")` or `docs/protocol.md: "Rounds"`, the
	// quote possibly on the next comment line; then optionally the rules
	// it cites: `, rule R7`, `, rules H1-H3`. At least a space comes
	// between the document and the quote, and the quote starts with a
	// letter, so a Go string literal ending in .md is no reference.
	quotedRef = regexp.MustCompile(`([A-Za-z0-9_./-]+\.md)` + "`?" + `[,:]?(?:[ \t]+|[ \t]*\n[ \t]*(?://|#)?[ \t]*)\(?"([A-Za-z` + "`" + `][^"\n]*)"(?:,[ \t]*(?:\n[ \t]*(?://|#)?[ \t]*)?rules?[ \t]+([A-Z]{1,2}[0-9]+)(?:-[A-Z]{0,2}([0-9]+))?)?`)
	// A markdown link or image: [text](target).
	mdLink = regexp.MustCompile(`!?\[[^\]\n]*\]\(([^)\s]+)\)`)
)

func TestHeadingReferencesResolve(t *testing.T) {
	top := root(t)
	d := &docs{t: t, top: top, hs: map[string][]*heading{}}
	checked := 0
	for _, rel := range files(t, top, ".go", ".md", ".sh") {
		text := read(t, top, rel)
		for _, m := range quotedRef.FindAllStringSubmatchIndex(text, -1) {
			name, quoted := text[m[2]:m[3]], text[m[4]:m[5]]
			line := lineOf(text, m[0])
			doc := d.resolve(rel, name)
			if doc == "" {
				t.Errorf("%s:%d: refers to %s, %q: no such document", rel, line, name, quoted)
				continue
			}
			hs, _ := d.headings(doc)
			var h *heading
			for _, c := range hs {
				if plain(c.text) == plain(quoted) {
					h = c
					break
				}
			}
			checked++
			if h == nil {
				t.Errorf("%s:%d: refers to %s, %q: %s has no such heading (it has: %s)", rel, line, name, quoted, doc, list(hs))
				continue
			}
			if m[6] < 0 {
				continue
			}
			for _, id := range ruleRange(text[m[6]:m[7]], span(text, m[8], m[9])) {
				if !h.rules[id] {
					t.Errorf("%s:%d: cites rule %s of %s, %q, which that section does not define", rel, line, id, doc, quoted)
				}
			}
		}
		if filepath.Ext(rel) != ".md" {
			continue
		}
		for _, m := range links(text) {
			target, line := m.target, m.line
			if isExternal(target) {
				continue
			}
			path, anchor, hasAnchor := strings.Cut(target, "#")
			if !hasAnchor || !strings.HasSuffix(path, ".md") && path != "" {
				continue
			}
			doc := rel
			if path != "" {
				if doc = d.resolve(rel, path); doc == "" {
					continue // TestRelativeLinksResolve reports it
				}
			}
			hs, _ := d.headings(doc)
			checked++
			if !slices.ContainsFunc(hs, func(h *heading) bool { return h.anchor == anchor }) {
				t.Errorf("%s:%d: links to %s#%s: %s has no heading with that anchor (it has: %s)", rel, line, path, anchor, doc, anchors(hs))
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no reference to a heading: the patterns no longer match how the repository writes them")
	}
}

func TestRelativeLinksResolve(t *testing.T) {
	top := root(t)
	checked := 0
	for _, rel := range files(t, top, ".md") {
		for _, m := range links(read(t, top, rel)) {
			if isExternal(m.target) {
				continue
			}
			path, _, _ := strings.Cut(m.target, "#")
			if path == "" {
				continue // an anchor in the same file: TestHeadingReferencesResolve
			}
			checked++
			if _, err := os.Stat(filepath.Join(top, filepath.FromSlash(filepath.Dir(rel)), filepath.FromSlash(path))); err != nil {
				t.Errorf("%s:%d: links to %s, which does not exist (relative to %s)", rel, m.line, path, filepath.Dir(rel))
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative link at all")
	}
}

type link struct {
	target string
	line   int
}

// links returns the markdown links of doc outside fenced code blocks and
// code spans.
func links(doc string) []link {
	var out []link
	fence := ""
	for i, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatchIndex(line, -1) {
			if strings.Count(line[:m[0]], "`")%2 == 1 {
				continue // inside a code span
			}
			out = append(out, link{target: line[m[2]:m[3]], line: i + 1})
		}
	}
	return out
}

func isExternal(target string) bool {
	return strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:")
}

func span(s string, from, to int) string {
	if from < 0 {
		return ""
	}
	return s[from:to]
}

// ruleRange expands "G1" (with last "3") to G1, G2, G3; with last "" to G1.
func ruleRange(first, last string) []string {
	i := strings.IndexFunc(first, unicode.IsDigit)
	prefix, n := first[:i], first[i:]
	lo, _ := strconv.Atoi(n)
	hi := lo
	if last != "" {
		hi, _ = strconv.Atoi(last)
	}
	var ids []string
	for k := lo; k <= hi; k++ {
		ids = append(ids, prefix+strconv.Itoa(k))
	}
	return ids
}

func list(hs []*heading) string {
	var s []string
	for _, h := range hs {
		s = append(s, fmt.Sprintf("%q", h.text))
	}
	return strings.Join(s, ", ")
}

func anchors(hs []*heading) string {
	var s []string
	for _, h := range hs {
		s = append(s, "#"+h.anchor)
	}
	return strings.Join(s, " ")
}
