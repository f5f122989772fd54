package dockercompat

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
)

// Snapshot diffs (SlopCodeBench's SnapshotDiff, reference §1.12). Upstream
// compared decodable text files only, so a created, deleted or changed
// binary file, a chmod and a symlink retarget were all invisible. Here
// every file and symlink is compared:
//   - created / deleted: the path is in only one of the two;
//   - modified: its contents, its mode (files only: a symlink's mode means
//     nothing on Linux), its symlink target, or its type changed. An mtime
//     alone is not a change.
// Text files get lines added and removed as upstream counts them (lines
// keep their "\n", so a missing final newline changes the last line);
// binary files (upstream's test: a NUL byte, or over 30 % of the first
// 8 KiB being control bytes other than tab, LF and CR) get sizes, and so
// do text files over MaxDiffText (lines_uncounted). Files are streamed and
// hashed: a diff's memory does not grow with their sizes.

// Change is how a path changed.
type Change string

// The three changes.
const (
	Created  Change = "created"
	Deleted  Change = "deleted"
	Modified Change = "modified"
)

// FileChange is one changed path. Old* describe it in A, New* in B.
type FileChange struct {
	Path   string `json:"path"`
	Change Change `json:"change"`
	// Type is "file" or "symlink": as in B, or in A when deleted.
	Type    string `json:"type"`
	OldType string `json:"old_type,omitempty"` // set when the type changed
	Binary  bool   `json:"binary,omitempty"`
	// Contents: true when the bytes (or target) differ, not just the mode.
	Contents     bool `json:"contents"`
	LinesAdded   int  `json:"lines_added"`
	LinesRemoved int  `json:"lines_removed"`
	// LinesUncounted: a text file over MaxDiffText on either side, compared
	// by its hash; its lines are not counted.
	LinesUncounted bool   `json:"lines_uncounted,omitempty"`
	OldSize        *int64 `json:"old_size,omitempty"`
	NewSize        *int64 `json:"new_size,omitempty"`
	OldMode        string `json:"old_mode,omitempty"` // octal, set for files
	NewMode        string `json:"new_mode,omitempty"`
	OldTarget      string `json:"old_target,omitempty"` // symlinks
	NewTarget      string `json:"new_target,omitempty"`
}

// ModeChanged reports a file whose mode differs.
func (c *FileChange) ModeChanged() bool {
	return c.Change == Modified && c.OldMode != "" && c.NewMode != "" && c.OldMode != c.NewMode
}

// DiffResult is every change from A to B, sorted by path.
type DiffResult struct {
	Changes []FileChange `json:"changes"`
}

// DiffStats are counts over a DiffResult (upstream's get_stats).
type DiffStats struct {
	Created      int `json:"created"`
	Deleted      int `json:"deleted"`
	Modified     int `json:"modified"`
	LinesAdded   int `json:"lines_added"`
	LinesRemoved int `json:"lines_removed"`
}

// Stats counts the changes and the text lines added and removed.
func (d *DiffResult) Stats() DiffStats {
	var s DiffStats
	for _, c := range d.Changes {
		switch c.Change {
		case Created:
			s.Created++
		case Deleted:
			s.Deleted++
		case Modified:
			s.Modified++
		}
		s.LinesAdded += c.LinesAdded
		s.LinesRemoved += c.LinesRemoved
	}
	return s
}

// Diff compares two snapshots, each an archive or a directory (a
// directory is read as a snapshot with opts would store it; archives are
// taken as they are).
func Diff(a, b string, opts SnapshotOptions) (*DiffResult, error) {
	ea, err := ReadSnapshot(a, opts)
	if err != nil {
		return nil, err
	}
	eb, err := ReadSnapshot(b, opts)
	if err != nil {
		return nil, err
	}
	return DiffEntries(ea, eb), nil
}

// DiffEntries compares two snapshots' entries.
func DiffEntries(a, b map[string]*Entry) *DiffResult {
	paths := slices.Sorted(maps.Keys(a))
	for p := range b {
		if _, ok := a[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	d := &DiffResult{Changes: []FileChange{}}
	for _, p := range paths {
		if c, ok := diffEntry(p, a[p], b[p]); ok {
			d.Changes = append(d.Changes, c)
		}
	}
	return d
}

func entryType(e *Entry) string {
	if e.Symlink {
		return "symlink"
	}
	return "file"
}

func diffEntry(p string, a, b *Entry) (FileChange, bool) {
	c := FileChange{Path: p}
	switch {
	case a == nil:
		c.Change, c.Type, c.Contents = Created, entryType(b), true
	case b == nil:
		c.Change, c.Type, c.Contents = Deleted, entryType(a), true
	default:
		c.Change, c.Type = Modified, entryType(b)
		if a.Symlink != b.Symlink {
			c.OldType, c.Contents = entryType(a), true
		}
	}
	if a != nil {
		describe(&c, a, true)
	}
	if b != nil {
		describe(&c, b, false)
	}
	if c.Change == Modified && c.OldType == "" {
		if a.Symlink {
			c.Contents = a.Linkname != b.Linkname
		} else {
			c.Contents = a.Size != b.Size || !bytes.Equal(a.Hash, b.Hash)
		}
		if !c.Contents && !c.ModeChanged() {
			return c, false
		}
	}
	var ta, tb []byte
	large := false
	for _, e := range []*Entry{a, b} {
		if e != nil && !e.Symlink {
			c.Binary = c.Binary || e.Binary
			large = large || (!e.Binary && e.Data == nil)
		}
	}
	if a != nil && !a.Symlink {
		ta = a.Data
	}
	if b != nil && !b.Symlink {
		tb = b.Data
	}
	if !c.Binary && c.Contents {
		if large {
			c.LinesUncounted = true
		} else {
			c.LinesAdded, c.LinesRemoved = lineChanges(splitLines(ta), splitLines(tb))
		}
	}
	return c, true
}

func describe(c *FileChange, e *Entry, old bool) {
	if e.Symlink {
		if old {
			c.OldTarget = e.Linkname
		} else {
			c.NewTarget = e.Linkname
		}
		return
	}
	mode, size := fmt.Sprintf("%04o", e.Mode), e.Size
	if old {
		c.OldMode, c.OldSize = mode, &size
	} else {
		c.NewMode, c.NewSize = mode, &size
	}
}

// isBinary is upstream's _is_binary.
func isBinary(data []byte) bool {
	if bytes.IndexByte(data, 0) >= 0 {
		return true
	}
	sample := data[:min(len(data), 8192)]
	if len(sample) == 0 {
		return false
	}
	n := 0
	for _, c := range sample {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
			n++
		}
	}
	return float64(n)/float64(len(sample)) > 0.3
}

// splitLines splits after each "\n", keeping it.
func splitLines(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n') + 1
		if i == 0 {
			i = len(b)
		}
		out = append(out, string(b[:i]))
		b = b[i:]
	}
	return out
}

// maxEditCost bounds Myers' search; past it, lines are matched as
// multisets (order ignored), which never undercounts by more than moved
// lines.
const maxEditCost = 4096

// lineChanges counts the lines a shortest line diff from a to b adds and
// removes.
func lineChanges(a, b []string) (added, removed int) {
	// Common prefix and suffix cost nothing.
	for len(a) > 0 && len(b) > 0 && a[0] == b[0] {
		a, b = a[1:], b[1:]
	}
	for len(a) > 0 && len(b) > 0 && a[len(a)-1] == b[len(b)-1] {
		a, b = a[:len(a)-1], b[:len(b)-1]
	}
	if d, ok := myers(a, b); ok {
		lcs := (len(a) + len(b) - d) / 2
		return len(b) - lcs, len(a) - lcs
	}
	count := map[string]int{}
	for _, l := range a {
		count[l]++
	}
	common := 0
	for _, l := range b {
		if count[l] > 0 {
			count[l]--
			common++
		}
	}
	return len(b) - common, len(a) - common
}

// myers is the length of the shortest insert/delete script from a to b
// (Myers 1986), or false past maxEditCost.
func myers(a, b []string) (int, bool) {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return n + m, true
	}
	maxD := min(n+m, maxEditCost)
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	for d := 0; d <= maxD; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				return d, true
			}
		}
	}
	return 0, false
}
