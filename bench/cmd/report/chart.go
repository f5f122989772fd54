package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// targetRow is one row of BENCHMARKS.md's Targets table, its cells as
// printed.
type targetRow struct {
	Target, Slopbox, Peer, Ratio, Goal, Met string
}

// ratio is the row's ratio cell as a number ("0.34×"), false when the row
// has none ("-": an absolute goal, or not measured).
func (r targetRow) ratio() (float64, bool) {
	s, ok := strings.CutSuffix(r.Ratio, "×")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil && v > 0
}

const targetsHeader = "| target | slopbox | compared with | ratio | goal | met |"

// parseTargets reads the Targets table from markdown (BENCHMARKS.md, or
// the table alone): the rows after its header, to the first line that is
// not a table row.
func parseTargets(md []byte) []targetRow {
	var rows []targetRow
	in := false
	for _, line := range strings.Split(string(md), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == targetsHeader:
			in = true
		case !in:
		case !strings.HasPrefix(line, "|"):
			return rows
		case strings.HasPrefix(line, "| ---"):
		default:
			c := cells(line)
			if len(c) != 6 {
				continue
			}
			rows = append(rows, targetRow{c[0], c[1], c[2], c[3], c[4], c[5]})
		}
	}
	return rows
}

// cells splits a markdown table row on its unescaped pipes, unescaping
// "\|" within a cell.
func cells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var out []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// The chart's geometry, in SVG user units.
const (
	chartWidth = 1200
	plotLeft   = 30
	plotWidth  = 1140
	// A bar's text line holds about this many characters; a longer
	// target is cut short.
	labelChars = 180
	headHeight = 78
	rowHeight  = 40
	footHeight = 34
)

// drawChart writes an SVG bar chart of rows: one horizontal bar per row
// with a ratio, from the 1× line (slopbox as fast, or as small, as the
// peer) to the ratio on a log₂ scale, left when slopbox's figure is the
// lower, coloured by the row's met cell, its ratio cell printed at the
// bar's end and the target and peer above it. Rows without a ratio have
// no bar.
func drawChart(w io.Writer, rows []targetRow) {
	type bar struct {
		targetRow
		r float64
	}
	var bars []bar
	lo, hi := 1.0, 1.0
	for _, row := range rows {
		if r, ok := row.ratio(); ok {
			bars = append(bars, bar{row, r})
			lo, hi = math.Min(lo, r), math.Max(hi, r)
		}
	}
	// Whole powers of two around the data, with room for the labels.
	lo2 := math.Floor(math.Log2(lo / 1.6))
	hi2 := math.Ceil(math.Log2(hi * 1.6))
	x := func(r float64) float64 {
		return plotLeft + (math.Log2(r)-lo2)/(hi2-lo2)*plotWidth
	}
	height := headHeight + len(bars)*rowHeight + footHeight
	plotBottom := float64(headHeight + len(bars)*rowHeight)
	e := func(s string) string {
		var b bytes.Buffer
		xml.EscapeText(&b, []byte(strings.ReplaceAll(s, "`", "")))
		return b.String()
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }

	p("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	p("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n", chartWidth, height, chartWidth, height)
	p("<title>slopbox's figure divided by each peer's, per target</title>\n")
	p("<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n")
	p("<text x=\"%d\" y=\"22\" font-size=\"16\" font-weight=\"bold\">slopbox ÷ peer, per target (BENCHMARKS.md's Targets table)</text>\n", plotLeft)
	p("<text x=\"%d\" y=\"42\" fill=\"#444444\">Log scale. Left of 1×: slopbox's figure is the lower (less time, less memory; for throughput, marked higher is better, right is better).</text>\n", plotLeft)
	legend := []struct{ colour, text string }{{"#2e7d32", "goal met"}, {"#c62828", "goal missed"}, {"#9e9e9e", "reported, no goal"}}
	for i, l := range legend {
		lx := plotLeft + i*150
		p("<rect x=\"%d\" y=\"52\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"62\">%s</text>\n", lx, l.colour, lx+17, l.text)
	}
	// The scale: a line at each power of two, the 1× line darker.
	for k := lo2; k <= hi2; k++ {
		r := math.Exp2(k)
		tx := x(r)
		stroke, label := "#e0e0e0", fmt.Sprintf("%g×", r)
		if k < 0 {
			label = fmt.Sprintf("1/%g×", 1/r)
		}
		if k == 0 {
			stroke = "#424242"
		}
		p("<line x1=\"%s\" y1=\"%d\" x2=\"%s\" y2=\"%s\" stroke=\"%s\"/>\n", f(tx), headHeight-6, f(tx), f(plotBottom), stroke)
		p("<text class=\"tick\" x=\"%s\" y=\"%s\" text-anchor=\"middle\" fill=\"#444444\">%s</text>\n", f(tx), f(plotBottom+16), label)
	}
	one := x(1)
	for i, b := range bars {
		y := float64(headHeight + i*rowHeight)
		colour := "#9e9e9e"
		switch b.Met {
		case "✓":
			colour = "#2e7d32"
		case "✗":
			colour = "#c62828"
		}
		if strings.HasPrefix(b.Goal, "reported") {
			colour = "#9e9e9e"
		}
		label, rest := []rune(b.Target), "vs "+b.Peer+" · goal "+b.Goal
		if n := labelChars - 1 - len([]rune(rest)); len(label) > n {
			label = append(label[:max(n-1, 20)], '…')
		}
		// A white outline keeps the text readable over the scale's lines.
		p("<text class=\"label\" x=\"%d\" y=\"%s\" stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\">%s <tspan fill=\"#555555\">%s</tspan></text>\n", plotLeft, f(y+12), e(string(label)), e(rest))
		bx, bw := x(b.r), one-x(b.r)
		tx, anchor := bx-4, "end"
		if b.r >= 1 {
			bx, bw = one, x(b.r)-one
			tx, anchor = x(b.r)+4, "start"
		}
		p("<rect class=\"bar\" x=\"%s\" y=\"%s\" width=\"%s\" height=\"14\" fill=\"%s\"><title>%s: %s against %s (goal %s, met %s)</title></rect>\n",
			f(bx), f(y+17), f(math.Max(bw, 1)), colour, e(b.Target), e(b.Ratio), e(b.Peer), e(b.Goal), e(b.Met))
		p("<text class=\"ratio\" x=\"%s\" y=\"%s\" text-anchor=\"%s\" font-weight=\"bold\">%s</text>\n", f(tx), f(y+28), anchor, e(b.Ratio))
	}
	p("</svg>\n")
}
