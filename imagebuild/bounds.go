package imagebuild

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"unicode"

	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/regfile"
)

// Bounds on what a Dockerfile and its context make a build hold in
// memory, whatever they say.
const (
	// MaxDockerfileBytes bounds the Dockerfile: BuildKit's parser holds
	// about 150 times a Dockerfile of short lines (some 150 MB for 1 MiB);
	// Dockerfiles in use are a few KiB, the largest tens of KiB.
	MaxDockerfileBytes = 1 << 20
	// MaxWordBytes bounds what one word of an instruction expands to
	// (ENV X=$X$X doubles at each line): eight times the kernel's bound on
	// one argument or environment string (MAX_ARG_STRLEN, 128 KiB), which
	// a longer ENV value could not be given to a process anyway.
	MaxWordBytes = 1 << 20
	// MaxDockerignoreBytes bounds .dockerignore (read once per build):
	// hundreds of thousands of patterns; real ones are a few KiB.
	MaxDockerignoreBytes = 1 << 20
	// MaxConfigBytes bounds the image config a stage builds, its build
	// args included: the store reads no config over image.MaxConfigBytes.
	MaxConfigBytes = image.MaxConfigBytes
)

// readBounded reads the regular file name of root (a FIFO or device is
// refused, not waited on), refusing one over bound, which the error
// names as the bound for a what.
func readBounded(root *os.Root, name, what string, bound int) ([]byte, error) {
	f, err := regfile.OpenIn(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(bound)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > bound {
		return nil, fmt.Errorf("it is over %d MiB, slopbox's bound for a %s: refused", bound>>20, what)
	}
	return b, nil
}

// expand expands word as Docker does (BuildKit's shell lexer), refusing
// one that could expand past MaxWordBytes before the lexer builds it: a
// first pass counts what the variables it names substitute
// (countingEnv); a ${NAME/pattern/replacement}, which repeats its
// replacement at every match, is taken as its value's length times what
// the rest of the word can make (that pass gives such values as empty).
func (bl *Builder) expand(word string, env []string) (string, error) {
	all := shell.EnvsFromSlice(env)
	subjects, refs := scanRefs(word)
	count := &countingEnv{env: all, empty: map[string]bool{}}
	for _, n := range subjects {
		count.empty[n] = true
	}
	if _, _, err := bl.lex.ProcessWord(word, count); err != nil {
		return "", err
	}
	rest := len(word) + count.n // a bound on any replacement, too
	for n := range count.empty {
		v, _ := all.Get(n)
		rest += len(v) * refs[n]
	}
	// Replacements may nest: each may repeat all the others.
	bound := rest
	for _, n := range subjects {
		v, _ := all.Get(n)
		if bound += (len(v) + 1) * (bound + 1); bound > MaxWordBytes {
			break
		}
	}
	if count.over || bound > MaxWordBytes {
		return "", fmt.Errorf("%s expands to more than %d MiB, slopbox's bound for one word: refused", abbrev(word), MaxWordBytes>>20)
	}
	v, _, err := bl.lex.ProcessWord(word, all)
	bl.expanded += len(v)
	return v, err
}

// countingEnv is an environment that counts the bytes it substitutes,
// giving nothing once MaxWordBytes have gone, and the names in empty as
// empty.
type countingEnv struct {
	env   shell.EnvGetter
	empty map[string]bool
	n     int
	over  bool
}

func (c *countingEnv) Get(k string) (string, bool) {
	v, ok := c.env.Get(k)
	if c.empty[k] || c.over {
		return "", ok
	}
	if c.n += len(v); c.n > MaxWordBytes {
		c.over = true
		return "", ok
	}
	return v, ok
}

func (c *countingEnv) Keys() []string { return c.env.Keys() }

// scanRefs finds in word, as written, the NAMEs of ${NAME/…} and
// ${NAME//…} (subjects, one per occurrence) and counts every other
// $NAME and ${NAME…}, naming variables as the lexer does. Escapes and
// quotes are not undone: a reference they hide is counted all the same,
// which only makes the bound larger.
func scanRefs(word string) (subjects []string, refs map[string]int) {
	refs = map[string]int{}
	rs := []rune(word)
	for i := 0; i < len(rs); i++ {
		if rs[i] != '$' {
			continue
		}
		j := i + 1
		brace := j < len(rs) && rs[j] == '{'
		if brace {
			j++
		}
		k := j
		switch {
		case k < len(rs) && unicode.IsDigit(rs[k]):
			for k < len(rs) && unicode.IsDigit(rs[k]) {
				k++
			}
		default:
			for k < len(rs) && (unicode.IsLetter(rs[k]) || unicode.IsDigit(rs[k]) || rs[k] == '_') {
				k++
			}
		}
		if k == j {
			continue
		}
		name := shell.NormalizeEnvKey(string(rs[j:k]))
		if brace && k < len(rs) && rs[k] == '/' {
			subjects = append(subjects, name)
		} else {
			refs[name]++
		}
		i = k - 1
	}
	return subjects, refs
}

func abbrev(s string) string {
	if len(s) > 60 {
		return fmt.Sprintf("%q…", s[:60])
	}
	return fmt.Sprintf("%q", s)
}

// sizeCheck holds a stage's config, with its build args, to
// MaxConfigBytes without marshalling it at every instruction: exact is
// its size when last measured, grown an upper bound on what instructions
// added since (an instruction adds its text to the history, and at most
// its words as expanded and the stage's SHELL to the config, each
// JSON-escaped at most sixfold, with a few bytes of syntax per word). It
// is measured again only when that bound could pass MaxConfigBytes.
type sizeCheck struct {
	exact, grown int
}

// measure sets exact to s's size now.
func (s *stage) measure() error {
	b, err := json.Marshal(s.cfg)
	if err != nil {
		return err
	}
	n := len(b)
	for k, v := range s.args {
		n += len(k) + len(v) + 2
	}
	s.size = sizeCheck{exact: n}
	if n > MaxConfigBytes {
		return fmt.Errorf("the image config, with the stage's build args, would be %d bytes, over the %d MiB bound for image configs: refused", n, MaxConfigBytes>>20)
	}
	return nil
}

// grew records that an instruction ran whose text, expanded words and
// SHELL come to n bytes.
func (s *stage) grew(n int) error {
	s.size.grown += 12*n + 256
	if s.size.exact+s.size.grown <= MaxConfigBytes {
		return nil
	}
	return s.measure()
}
