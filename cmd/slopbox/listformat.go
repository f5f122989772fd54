package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"text/template"
)

// listTemplate is docker's --format of a listing (ps, images) when it is a
// Go template: "table" before it adds a header row, `\t` and `\n` are tab
// and newline, and json is a function, as in docker's.
type listTemplate struct {
	tmpl   *template.Template
	header bool
}

// parseListTemplate parses format; "" and "json" are not templates (nil).
func parseListTemplate(name, format string) (*listTemplate, error) {
	if format == "" || format == "json" {
		return nil, nil
	}
	text, isTable := strings.CutPrefix(format, "table")
	text = strings.NewReplacer(`\t`, "\t", `\n`, "\n").Replace(text)
	tmpl, err := template.New(name).Funcs(template.FuncMap{"json": jsonString}).Parse(strings.TrimSpace(text) + "\n")
	if err != nil {
		return nil, fmt.Errorf("--format: %w", err)
	}
	return &listTemplate{tmpl: tmpl, header: isTable}, nil
}

// writeList prints rows through t, aligned in columns, after header when t
// is a table.
func writeList[T any](t *listTemplate, header T, rows []T) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
	if t.header {
		rows = append([]T{header}, rows...)
	}
	for _, r := range rows {
		if err := t.tmpl.Execute(w, r); err != nil {
			return fmt.Errorf("--format: %w", err)
		}
	}
	return w.Flush()
}

// jsonString is the template function json.
func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
