// Package flagdoc renders a command's flags as the Markdown table docs/flags.md shows, and
// checks the document against the code, so the reference cannot drift from the binaries.
package flagdoc

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Markdown renders every flag of fs, sorted by name, as a table: flag, default, meaning.
func Markdown(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		def := "`" + f.DefValue + "`"
		if f.DefValue == "" {
			def = ""
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Name, def, strings.ReplaceAll(f.Usage, "|", `\|`))
	})
	return b.String()
}

// Markers around a command's table in the document.
func begin(command string) string {
	return "<!-- flags: " + command + " (generated from the code; a test fails when they differ) -->\n"
}

const end = "<!-- /flags -->\n"

// Check compares command's table in the document at path with table. With update, it
// writes table into the document instead (go test ./cmd/... -args -update-docs).
func Check(path, command, table string, update bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(raw)
	b := strings.Index(doc, begin(command))
	if b < 0 {
		return fmt.Errorf("%s has no %q marker for %s", path, strings.TrimSpace(begin(command)), command)
	}
	b += len(begin(command))
	e := strings.Index(doc[b:], end)
	if e < 0 {
		return fmt.Errorf("%s: the table of %s has no end marker %q", path, command, strings.TrimSpace(end))
	}
	if doc[b:b+e] == table {
		return nil
	}
	if update {
		return os.WriteFile(path, []byte(doc[:b]+table+doc[b+e:]), 0o644)
	}
	return fmt.Errorf("%s: the flags of %s differ from the code; run `go test ./cmd/... -args -update-docs` and commit the result. The code says:\n%s", path, command, table)
}
