// Package docs_test checks that the documentation refers only to things in the repository:
// every relative link resolves to a file (and, for a Markdown page, to a heading of it), and
// every repository path written in code spans exists.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	// A repository path: starts with one of the repository's top-level directories.
	repoPath = regexp.MustCompile(`^(cmd|pkg|internal|manifests|charts|docs|test|hack|bench|examples)/[A-Za-z0-9_./-]*$`)
	heading  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
)

// pages are the Markdown files users read.
func pages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, glob := range []string{"../*.md", "*.md", "../bench/*.md", "../charts/*/*.md", "../manifests/*/*.md"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	if len(out) < 5 {
		t.Fatalf("found only %v", out)
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, punctuation dropped but '-' and '_',
// spaces to '-'.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, page string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence {
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			text := strings.ReplaceAll(m[1], "`", "")
			text = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(text, "$1")
			out[slug(text)] = true
		}
	}
	return out
}

func TestDocsReferToTheRepository(t *testing.T) {
	for _, page := range pages(t) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		dir := filepath.Dir(page)
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(dir, file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which is not in the repository", page, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[anchor] {
				t.Errorf("%s links to %s: %s has no heading #%s", page, target, path, anchor)
			}
		}
		root := ".."
		for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
			p := strings.TrimRight(m[1], ".,:;")
			if !repoPath.MatchString(p) || strings.Contains(p, "...") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("%s names `%s`, which is not in the repository", page, m[1])
			}
		}
	}
}
