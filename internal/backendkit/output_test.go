package backendkit

import (
	"bytes"
	"github.com/slopbox/slopbox/backend"
	"strings"
	"testing"
)

func TestToUTF8(t *testing.T) {
	cases := []struct{ in, want string }{
		{"\xffabc", "\uFFFDabc"},
		{"plain", "plain"},
		{"é€😀", "é€😀"},
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"\xe2\x82a", "\uFFFDa"},               // truncated 3-byte sequence: one replacement
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: each byte
		{"\xf0\x9f\x98", "\uFFFD"},             // truncated at the end
		{"a\x00b", "a\x00b"},
		{"\uFFFD", "\uFFFD"},
	}
	for _, c := range cases {
		if got := ToUTF8([]byte(c.in)); got != c.want {
			t.Errorf("ToUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestUTF8DecoderChunkBoundaries(t *testing.T) {
	in := []byte("héllo €uro 😀 end\xff!")
	want := ToUTF8(in)
	for size := 1; size <= len(in); size++ {
		var d UTF8Decoder
		var out strings.Builder
		for i := 0; i < len(in); i += size {
			out.WriteString(d.Decode(in[i:min(i+size, len(in))]))
		}
		out.WriteString(d.Flush())
		if out.String() != want {
			t.Fatalf("chunk size %d: %q, want %q", size, out.String(), want)
		}
	}
	var d UTF8Decoder
	if got := d.Decode([]byte("a\xe2\x82")) + d.Flush(); got != "a\uFFFD" {
		t.Fatalf("stream ending inside a sequence: %q", got)
	}
}

func TestOutputCap(t *testing.T) {
	o := Output{Limit: 10}
	for i := 0; i < 5; i++ {
		o.Write([]byte("0123456"))
	}
	if o.Size() != 35 || !o.Truncated() || o.String() != "0123456012" {
		t.Fatalf("size %d truncated %v text %q", o.Size(), o.Truncated(), o.String())
	}
	u := Output{}
	u.Write(bytes.Repeat([]byte("x"), 1<<20))
	if u.Truncated() || u.Size() != 1<<20 || len(u.String()) != 1<<20 {
		t.Fatal("unlimited output was capped")
	}
	// A cap in the middle of "€" drops the partial character rather than showing U+FFFD.
	c := Output{Limit: 4}
	c.Write([]byte("ab€"))
	if c.String() != "ab" || !c.Truncated() {
		t.Fatalf("got %q", c.String())
	}
}

// TestOutputAcrossChunks: output kept in several pooled chunks, with
// characters split between writes and between chunks, joins back exactly,
// also under a cap that falls beyond the first chunk.
func TestOutputAcrossChunks(t *testing.T) {
	want := strings.Repeat("a€bc\x00", 700_000) // 4.9 MB, "€" is 3 bytes
	for _, limit := range []int64{0, 3*chunkSize + 1} {
		o := Output{Limit: limit}
		for i := 0; i < len(want); i += 99_991 {
			o.Write([]byte(want[i:min(i+99_991, len(want))]))
		}
		exp := want
		if limit > 0 {
			exp = want[:limit]
			exp = exp[:len(exp)-incompleteTail([]byte(exp))]
		}
		if got := o.String(); got != exp || o.Size() != int64(len(want)) || o.Truncated() != (limit > 0) {
			t.Fatalf("limit %d: got %d bytes (equal %v), size %d, truncated %v", limit, len(got), got == exp, o.Size(), o.Truncated())
		}
		if o.String() != exp {
			t.Fatal("a second String differs")
		}
	}
}

func TestCaptureBufferedAndStreaming(t *testing.T) {
	raw := "setup-out\n\n\n" + backend.SplitMarker + "\n\ncmd-out\n"
	for _, buffered := range []bool{true, false} {
		c := NewCapture(0, true)
		var streamed strings.Builder
		for i := 0; i < len(raw); i += 3 {
			streamed.WriteString(c.Write([]byte(raw[i:min(i+3, len(raw))])))
		}
		streamed.WriteString(c.Flush())
		r := c.Result(buffered)
		if r.Setup != "setup-out\n\n\n" || r.Output != "\n\ncmd-out\n" || r.Size != int64(len("\n\ncmd-out\n")) || r.Truncated {
			t.Fatalf("buffered=%v: %+v", buffered, r)
		}
		if streamed.String() != "\n\ncmd-out\n" {
			t.Fatalf("streamed %q", streamed.String())
		}
	}
}

func TestCaptureMarkerInCommandOutput(t *testing.T) {
	raw := "s\n" + backend.SplitMarker + "one" + backend.SplitMarker + "last"
	c := NewCapture(0, true)
	c.Write([]byte(raw))
	if r := c.Result(true); r.Setup != "s\n\none" || r.Output != "last" || r.Size != 4 {
		t.Fatalf("buffered: %+v", r)
	}
	c = NewCapture(0, true)
	c.Write([]byte(raw))
	if r := c.Result(false); r.Setup != "s\n" || r.Output != "one"+backend.SplitMarker+"last" {
		t.Fatalf("streaming: %+v", r)
	}
}

func TestCaptureNoMarker(t *testing.T) {
	c := NewCapture(3, true)
	if s := c.Write([]byte("abcdef")); s != "" {
		t.Fatalf("streamed %q before the marker", s)
	}
	r := c.Result(true)
	if r.Setup != "" || r.Output != "abc" || r.Size != 6 || !r.Truncated {
		t.Fatalf("%+v", r)
	}
}

func TestCaptureWithoutSetup(t *testing.T) {
	c := NewCapture(5, false)
	got := c.Write([]byte("\xe2\x82")) + c.Write([]byte("\xacabcdefgh")) + c.Flush()
	if got != "€abcdefgh" {
		t.Fatalf("streamed %q", got)
	}
	r := c.Result(true)
	if r.Output != "€ab" || r.Size != 11 || !r.Truncated {
		t.Fatalf("%+v", r)
	}
}
