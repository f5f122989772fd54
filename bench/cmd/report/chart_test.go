package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// svgBar is what the chart shows of one bar.
type svgBar struct {
	x, width float64
	title    string
	label    string // the ratio printed at its end
}

// readChart checks that b is a well-formed SVG document and returns its
// bars, in order, and the x of its 1× line.
func readChart(t *testing.T, b []byte) (bars []svgBar, one float64) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	var stack []xml.StartElement
	var ratios []string
	one = math.NaN()
	var tickX float64
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg in the SVG namespace", tok.Name)
			}
			attr := map[string]string{}
			for _, a := range tok.Attr {
				attr[a.Name.Local] = a.Value
			}
			switch {
			case tok.Name.Local == "rect" && attr["class"] == "bar":
				x, err1 := strconv.ParseFloat(attr["x"], 64)
				w, err2 := strconv.ParseFloat(attr["width"], 64)
				if err1 != nil || err2 != nil || w <= 0 {
					t.Fatalf("bar at x=%q width=%q", attr["x"], attr["width"])
				}
				bars = append(bars, svgBar{x: x, width: w})
			case tok.Name.Local == "text" && attr["class"] == "tick":
				tickX, _ = strconv.ParseFloat(attr["x"], 64)
			}
			stack = append(stack, tok)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) < 2 {
				continue
			}
			el, parent := stack[len(stack)-1], stack[len(stack)-2]
			switch {
			case el.Name.Local == "title" && parent.Name.Local == "rect" && len(bars) > 0:
				bars[len(bars)-1].title += string(tok)
			case el.Name.Local == "text" && hasClass(el, "ratio"):
				ratios = append(ratios, string(tok))
			case el.Name.Local == "text" && hasClass(el, "tick") && string(tok) == "1×":
				one = tickX
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements: %v", stack)
	}
	if len(ratios) != len(bars) {
		t.Fatalf("%d bars, %d ratio labels", len(bars), len(ratios))
	}
	for i := range bars {
		bars[i].label = ratios[i]
	}
	if math.IsNaN(one) {
		t.Fatal("the chart has no 1× line")
	}
	return bars, one
}

func hasClass(el xml.StartElement, class string) bool {
	for _, a := range el.Attr {
		if a.Name.Local == "class" {
			return a.Value == class
		}
	}
	return false
}

// checkChart checks the chart drawn from rows: one bar per row with a
// ratio, in order, labelled with the row's ratio cell and titled with its
// target, on the side of the 1× line the ratio says, longer the further
// the ratio is from 1 (log scale).
func checkChart(t *testing.T, svg []byte, rows []targetRow) {
	t.Helper()
	bars, one := readChart(t, svg)
	var want []targetRow
	for _, r := range rows {
		if _, ok := r.ratio(); ok {
			want = append(want, r)
		}
	}
	if len(want) == 0 || len(want) == len(rows) {
		t.Fatalf("%d of %d rows have a ratio: the data should have rows with and without", len(want), len(rows))
	}
	if len(bars) != len(want) {
		t.Fatalf("%d bars, want one per row with a ratio: %d", len(bars), len(want))
	}
	const eps = 0.11 // the chart's coordinates have one decimal
	for i, b := range bars {
		r, _ := want[i].ratio()
		if b.label != want[i].Ratio {
			t.Errorf("bar %d is labelled %q, want the table's %q", i, b.label, want[i].Ratio)
		}
		if !strings.HasPrefix(b.title, strings.ReplaceAll(want[i].Target, "`", "")+": "+want[i].Ratio) {
			t.Errorf("bar %d's title %q, want the target %q", i, b.title, want[i].Target)
		}
		switch {
		case r < 1 && math.Abs(b.x+b.width-one) > eps:
			t.Errorf("bar %d (%s) does not end at the 1× line (x %v): %+v", i, want[i].Ratio, one, b)
		case r >= 1 && math.Abs(b.x-one) > eps:
			t.Errorf("bar %d (%s) does not start at the 1× line (x %v): %+v", i, want[i].Ratio, one, b)
		}
		for j, c := range bars {
			rc, _ := want[j].ratio()
			if math.Abs(math.Log(r)) > math.Abs(math.Log(rc))+0.05 && b.width <= c.width {
				t.Errorf("bar %d (%s) is not longer than bar %d (%s) on a log scale: %v ≤ %v", i, want[i].Ratio, j, want[j].Ratio, b.width, c.width)
			}
		}
	}
}

// TestChartFromResults: a results directory (testdata/results, a small
// run) gives BENCHMARKS.md with the chart's image in it, and the chart's
// bars are the Targets table's rows.
func TestChartFromResults(t *testing.T) {
	var md bytes.Buffer
	rows := report(&md, "testdata/results", "bench.svg")
	if !strings.Contains(md.String(), "## Targets\n\n![") || !strings.Contains(md.String(), "](bench.svg)\n") {
		t.Errorf("BENCHMARKS.md does not show bench.svg under Targets:\n%.600s", md.String())
	}
	if parsed := parseTargets(md.Bytes()); !reflect.DeepEqual(parsed, rows) {
		t.Errorf("the rows report returns differ from its table's:\n%v\n%v", rows, parsed)
	}
	// A cell with an escaped pipe is one cell.
	found := false
	for _, r := range rows {
		found = found || r.Peer == "the same dd | wc -c on the host 4.93 ms" && r.Ratio == "3.00×"
	}
	if !found {
		t.Errorf("no row for the CLI's 10 MB dd: %v", rows)
	}
	var svg bytes.Buffer
	drawChart(&svg, rows)
	checkChart(t, svg.Bytes(), rows)
}

// TestCommittedChart: bench.svg at the top of the repository is the chart
// of BENCHMARKS.md's Targets table, and BENCHMARKS.md shows it.
func TestCommittedChart(t *testing.T) {
	md, err := os.ReadFile("../../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("../../../bench.svg")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(md, []byte("](bench.svg)\n")) {
		t.Error("BENCHMARKS.md does not show bench.svg")
	}
	rows := parseTargets(md)
	var svg bytes.Buffer
	drawChart(&svg, rows)
	if !bytes.Equal(svg.Bytes(), committed) {
		t.Error("bench.svg is not the chart of BENCHMARKS.md: go run ./bench/cmd/report -chart-from BENCHMARKS.md -svg bench.svg")
	}
	checkChart(t, committed, rows)
}
