package backendkit

import (
	"github.com/slopbox/slopbox/backend"
	"strings"
	"sync"
	"unicode/utf8"
)

// ToUTF8 converts bytes to a valid UTF-8 string. Each maximal invalid
// subsequence becomes one U+FFFD, as Python's errors="replace" does, so
// nothing is dropped: printf '\377abc' gives "\uFFFDabc".
func ToUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r != utf8.RuneError || size > 1 {
			sb.Write(b[:size])
			b = b[size:]
			continue
		}
		n, _ := invalidPrefix(b)
		sb.WriteRune(utf8.RuneError)
		b = b[n:]
	}
	return sb.String()
}

// invalidPrefix measures the maximal subpart at the start of b, which does
// not begin with a valid rune: the lead byte plus the continuation bytes that
// are still valid for it. incomplete is true when b ends inside a sequence
// that could still become valid with more bytes.
func invalidPrefix(b []byte) (n int, incomplete bool) {
	want, lo, hi := seqInfo(b[0])
	if want == 0 {
		return 1, false
	}
	n = 1
	for n < want && n < len(b) {
		c := b[n]
		if n == 1 {
			if c < lo || c > hi {
				return n, false
			}
		} else if c < 0x80 || c > 0xBF {
			return n, false
		}
		n++
	}
	return n, n < want
}

// seqInfo returns the sequence length a lead byte announces and the valid
// range of the second byte (Unicode Table 3-7). want is 0 for a byte that can
// never start a sequence.
func seqInfo(c byte) (want int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

// incompleteTail returns how many bytes at the end of b form the start of a
// sequence that more bytes could complete (0 to 3).
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		i := len(b) - k
		if b[i] < 0x80 {
			return 0
		}
		if b[i] >= 0xC0 {
			if _, inc := invalidPrefix(b[i:]); inc {
				return k
			}
			return 0
		}
	}
	return 0
}

// UTF8Decoder converts a byte stream that arrives in chunks to UTF-8 text,
// carrying an incomplete multi-byte sequence at the end of a chunk over to
// the next one instead of replacing or dropping it. The zero value is ready.
type UTF8Decoder struct {
	carry []byte
}

// Decode returns the text of p, minus an incomplete tail that is kept for the
// next call.
func (d *UTF8Decoder) Decode(p []byte) string {
	buf := p
	if len(d.carry) > 0 {
		buf = append(d.carry, p...)
		d.carry = nil
	}
	if k := incompleteTail(buf); k > 0 {
		d.carry = append([]byte(nil), buf[len(buf)-k:]...)
		buf = buf[:len(buf)-k]
	}
	return ToUTF8(buf)
}

// Flush returns what is still carried (as U+FFFD: the stream ended inside a
// sequence) and resets the decoder.
func (d *UTF8Decoder) Flush() string {
	s := ToUTF8(d.carry)
	d.carry = nil
	return s
}

// Output collects one stream: it counts every byte, keeps at most Limit of
// them (0 keeps everything) and converts what it kept to UTF-8.
//
// The kept bytes go into pooled 1 MiB chunks and are joined once, into the
// result string itself: collecting 10 MB costs one fresh 10 MB allocation,
// not a doubling slice's copies and page faults (4–8× slower here).
type Output struct {
	Limit  int64
	chunks []*[]byte // the last one is filled up to last
	last   int
	kept   int64
	total  int64

	joined bool
	text   string // the kept bytes, once joined
}

const chunkSize = 1 << 20

var chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// Write keeps what fits under the limit and counts everything. It never
// fails. Writing after String is not supported.
func (o *Output) Write(p []byte) (int, error) {
	n := len(p)
	o.total += int64(n)
	if o.Limit > 0 {
		room := o.Limit - o.kept
		if room <= 0 {
			return n, nil
		}
		p = p[:min(room, int64(len(p)))]
	}
	o.kept += int64(len(p))
	for len(p) > 0 {
		if len(o.chunks) == 0 || o.last == chunkSize {
			o.chunks = append(o.chunks, chunkPool.Get().(*[]byte))
			o.last = 0
		}
		c := copy((*o.chunks[len(o.chunks)-1])[o.last:], p)
		o.last += c
		p = p[c:]
	}
	return n, nil
}

// Size is the number of bytes written, before any cap.
func (o *Output) Size() int64 { return o.total }

// Truncated reports whether bytes were dropped by the cap.
func (o *Output) Truncated() bool { return o.total > o.kept }

// join builds the kept bytes into one string and returns the chunks to the
// pool.
func (o *Output) join() string {
	if o.joined {
		return o.text
	}
	var sb strings.Builder
	sb.Grow(int(o.kept))
	for i, c := range o.chunks {
		n := chunkSize
		if i == len(o.chunks)-1 {
			n = o.last
		}
		sb.Write((*c)[:n])
		chunkPool.Put(c)
	}
	o.chunks, o.last = nil, 0
	o.joined, o.text = true, sb.String()
	return o.text
}

// String returns the kept bytes as UTF-8. When the cap cut a multi-byte
// character in two, the cut-off start is left out rather than shown as
// U+FFFD, because it was valid output.
func (o *Output) String() string {
	s := o.join()
	if o.Truncated() {
		s = s[:len(s)-incompleteTail([]byte(s[max(0, len(s)-3):]))]
	}
	if utf8.ValidString(s) {
		return s
	}
	return ToUTF8([]byte(s))
}

// Capture processes one stream (stdout or stderr) of one command: the
// optional setup split, the output cap and the UTF-8 conversion. Backends
// feed it raw chunks and send what Write returns as stream events.
// It is not safe for concurrent use; use one per stream.
type Capture struct {
	// Quiet skips decoding chunks for streaming: a buffered result is
	// decoded once, at the end.
	Quiet bool
	split *backend.StreamSplitter // nil: setup disabled, every byte is command output
	setup Output
	cmd   Output
	dec   UTF8Decoder
}

// NewCapture returns a Capture with the output cap limit (0: unlimited).
// withSetup says that the stream comes from the entry script and carries
// the marker; setup output is capped by the same limit, separately.
func NewCapture(limit int64, withSetup bool) *Capture {
	c := &Capture{setup: Output{Limit: limit}, cmd: Output{Limit: limit}}
	if withSetup {
		c.split = &backend.StreamSplitter{}
	}
	return c
}

// Write consumes a raw chunk and returns the text to stream now: nothing
// before the first marker (reference streaming semantics), then the command
// output, with an incomplete UTF-8 tail carried to the next chunk.
func (c *Capture) Write(p []byte) string {
	if c.split != nil {
		found := c.split.Found()
		p = c.split.Write(p)
		if !found && c.split.Found() {
			c.setup.Write(c.split.Setup())
			c.split.DropSetup() // kept in c.setup now, under the cap
		}
		if p == nil {
			return ""
		}
	}
	c.cmd.Write(p)
	if c.Quiet {
		return ""
	}
	return c.dec.Decode(p)
}

// Flush returns the text of an incomplete sequence left at the end of the
// stream (as U+FFFD), to be streamed before the finished event.
func (c *Capture) Flush() string {
	return c.dec.Flush()
}

// CaptureResult is what one stream contributed to a backend.Result.
type CaptureResult struct {
	Setup, Output string
	Size          int64 // size of Output before the cap
	Truncated     bool
}

// Result returns the split output. buffered selects the split point: the
// last marker (Exec) or the first (Stream). Without a marker everything is
// command output and Setup is "".
func (c *Capture) Result(buffered bool) CaptureResult {
	if c.split != nil && !c.split.Found() {
		// No marker: the withheld bytes are command output.
		var o Output
		o.Limit = c.cmd.Limit
		o.Write(c.split.Pending())
		return CaptureResult{Output: o.String(), Size: o.Size(), Truncated: o.Truncated()}
	}
	res := CaptureResult{
		Setup:     c.setup.String(),
		Output:    c.cmd.String(),
		Size:      c.cmd.Size(),
		Truncated: c.cmd.Truncated() || c.setup.Truncated(),
	}
	if buffered && c.split != nil && strings.Contains(res.Output, backend.SplitMarker) {
		// The command printed the marker itself: the buffered contract splits
		// at the last one, moving the earlier command output into setup.
		setup, cmd := backend.SplitBuffered(res.Setup + backend.SplitMarker + res.Output)
		res.Size -= int64(len(res.Output) - len(cmd))
		res.Setup, res.Output = setup, cmd
	}
	return res
}
