package dockercompat

import "slices"

// Glob is a pattern with Python fnmatch semantics (SlopCodeBench matches
// snapshot globs with fnmatch.fnmatch on POSIX): case-sensitive, '*'
// matches any run of characters including '/', '?' one character,
// '[abc]', '[a-z]' and '[!abc]' one character of (or not of) a set; a '['
// without its ']' is a literal '['. There is no escape character: '\' is
// literal, as in fnmatch. So '**' is just '*' twice, "*.pyc" matches at
// any depth and "venv/*" only under the top-level venv.
type Glob struct {
	pat   string
	parts []globPart
}

type globPart struct {
	kind   byte // 'c' literal, '?', '*', '[' set, 'x' never matches
	r      rune
	neg    bool
	ranges [][2]rune
}

// CompileGlob parses pattern; every pattern is valid.
func CompileGlob(pattern string) Glob {
	p := []rune(pattern)
	g := Glob{pat: pattern}
	for i := 0; i < len(p); {
		c := p[i]
		i++
		switch c {
		case '*':
			if n := len(g.parts); n == 0 || g.parts[n-1].kind != '*' {
				g.parts = append(g.parts, globPart{kind: '*'})
			}
		case '?':
			g.parts = append(g.parts, globPart{kind: '?'})
		case '[':
			j := i
			if j < len(p) && p[j] == '!' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			}
			for j < len(p) && p[j] != ']' {
				j++
			}
			if j >= len(p) {
				g.parts = append(g.parts, globPart{kind: 'c', r: '['})
				continue
			}
			stuff := p[i:j]
			i = j + 1
			part := globPart{kind: '['}
			if len(stuff) > 0 && stuff[0] == '!' {
				part.neg, stuff = true, stuff[1:]
			}
			for k := 0; k < len(stuff); {
				if k+2 < len(stuff) && stuff[k+1] == '-' {
					// A reversed range (z-a) is empty, as fnmatch makes it.
					if stuff[k] <= stuff[k+2] {
						part.ranges = append(part.ranges, [2]rune{stuff[k], stuff[k+2]})
					}
					k += 3
					continue
				}
				part.ranges = append(part.ranges, [2]rune{stuff[k], stuff[k]})
				k++
			}
			switch {
			case len(part.ranges) == 0 && part.neg:
				part = globPart{kind: '?'} // [!] matches any one character
			case len(part.ranges) == 0:
				part = globPart{kind: 'x'} // only reversed ranges: never matches
			}
			g.parts = append(g.parts, part)
		default:
			g.parts = append(g.parts, globPart{kind: 'c', r: c})
		}
	}
	return g
}

func (g Glob) String() string { return g.pat }

func (p globPart) one(r rune) bool {
	switch p.kind {
	case 'c':
		return p.r == r
	case '?':
		return true
	case '[':
		in := slices.ContainsFunc(p.ranges, func(rg [2]rune) bool { return rg[0] <= r && r <= rg[1] })
		return in != p.neg
	}
	return false
}

// Match reports whether the whole of name matches.
func (g Glob) Match(name string) bool {
	s := []rune(name)
	// The classic one-star backtracking: '*' crosses '/', so only the
	// last star ever needs to be retried.
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		switch {
		case pi < len(g.parts) && g.parts[pi].kind == '*':
			starP, starS = pi, si
			pi++
		case pi < len(g.parts) && g.parts[pi].one(s[si]):
			pi++
			si++
		case starP >= 0:
			starS++
			pi, si = starP+1, starS
		default:
			return false
		}
	}
	for pi < len(g.parts) && g.parts[pi].kind == '*' {
		pi++
	}
	return pi == len(g.parts)
}

// globSet matches a relative path the way SlopCodeBench's _matches_any
// does: against both "rel" and "./rel".
type globSet []Glob

func compileGlobs(patterns []string) globSet {
	out := make(globSet, 0, len(patterns))
	for _, p := range patterns {
		out = append(out, CompileGlob(p))
	}
	return out
}

func (gs globSet) match(rel string) bool {
	for _, g := range gs {
		if g.Match(rel) || g.Match("./"+rel) {
			return true
		}
	}
	return false
}
