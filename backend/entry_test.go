package backend

import (
	"reflect"
	"strings"
	"testing"
)

// The rendering the reference documents for setup ["uv init",
// "uv add -r requirements.txt"] and command "uv run main.py" (§1.5).
const referenceScript = "#!/bin/sh\n" +
	"uv init\n" +
	"uv add -r requirements.txt\n" +
	"\n" +
	"\n" +
	"echo \"\n" +
	"\n" +
	"_____STARTING COMMAND_____\n" +
	"\" >&2\n" +
	"echo \"\n" +
	"\n" +
	"_____STARTING COMMAND_____\n" +
	"\"\n" +
	"uv run main.py\n"

func TestEntryScriptMatchesReference(t *testing.T) {
	got := string(EntryScript([]string{"uv init", "uv add -r requirements.txt"}, "uv run main.py"))
	if got != referenceScript {
		t.Fatalf("entry script differs:\ngot  %q\nwant %q", got, referenceScript)
	}
}

func TestEntryScriptWithoutSetup(t *testing.T) {
	got := string(EntryScript(nil, "echo hi"))
	want := "#!/bin/sh\n\necho \"\n\n_____STARTING COMMAND_____\n\" >&2\necho \"\n\n_____STARTING COMMAND_____\n\"\necho hi\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !strings.HasPrefix(got, "#!/bin/sh\n") || !strings.Contains(got, ">&2") {
		t.Fatal("script must start with #!/bin/sh and echo the marker to stderr")
	}
}

func TestConstants(t *testing.T) {
	if EntryScriptName != "HANDLE_ENTRY.sh" || SplitMarker != "_____STARTING COMMAND_____" {
		t.Fatal("constants changed")
	}
}

func TestFormatSetupCommands(t *testing.T) {
	cases := []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{}, ""},
		{[]string{"echo hello"}, "echo hello\n\n"},
		{[]string{"cd /app", "pip install -e .", "echo done"}, "cd /app\npip install -e .\necho done\n\n"},
		{[]string{`export FOO="bar baz"`, "echo 'it''s'"}, "export FOO=\"bar baz\"\necho 'it''s'\n\n"},
	}
	for _, c := range cases {
		if got := FormatSetupCommands(c.in); got != c.want {
			t.Errorf("FormatSetupCommands(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSetupCommandsOrder(t *testing.T) {
	s := Setup{Commands: []string{"a", "b"}, EvalCommands: []string{"e"}, Command: "last"}
	if got := SetupCommands(s, ContextEvaluation); !reflect.DeepEqual(got, []string{"a", "b", "e", "last"}) {
		t.Errorf("evaluation: %q", got)
	}
	if got := SetupCommands(s, ContextAgent); !reflect.DeepEqual(got, []string{"a", "b", "last"}) {
		t.Errorf("agent: %q", got)
	}
	if got := SetupCommands(Setup{Commands: []string{"echo setup"}}, ContextAgent); FormatSetupCommands(got) != "echo setup\n\n" {
		t.Errorf("got %q", got)
	}
	if got := SetupCommands(Setup{Commands: []string{"echo setup"}, EvalCommands: []string{"echo eval"}}, ContextEvaluation); FormatSetupCommands(got) != "echo setup\necho eval\n\n" {
		t.Errorf("got %q", got)
	}
	if got := SetupCommands(Setup{}, ContextEvaluation); len(got) != 0 {
		t.Errorf("empty setup gave %q", got)
	}
}

func TestSplitBuffered(t *testing.T) {
	m := SplitMarker
	cases := []struct{ in, setup, cmd string }{
		// What the entry script produces for setup "echo setup-out", command "echo cmd-out".
		{"setup-out\n\n\n" + m + "\n\ncmd-out\n", "setup-out\n\n\n", "\n\ncmd-out\n"},
		{"\n\n" + m + "\n\n", "\n\n", "\n\n"},
		{"no marker here", "", "no marker here"},
		{"", "", ""},
		{m + "cmd", "", "cmd"},
		{"setup" + m, "setup", ""},
		{"a" + m + "b" + m + "last", "a\nb", "last"},
		{"  spaced \n" + m + "  out  ", "  spaced \n", "  out  "},
	}
	for _, c := range cases {
		s, o := SplitBuffered(c.in)
		if s != c.setup || o != c.cmd {
			t.Errorf("SplitBuffered(%q) = %q, %q; want %q, %q", c.in, s, o, c.setup, c.cmd)
		}
	}
	if s, o := SplitFirst("a" + m + "b" + m + "c"); s != "a" || o != "b"+m+"c" {
		t.Errorf("SplitFirst = %q, %q", s, o)
	}
}

func TestStreamSplitter(t *testing.T) {
	full := "setup-out\n\n\n" + SplitMarker + "\n\ncmd-out\n" + SplitMarker + "again"
	// Every way of cutting the input into two or three chunks gives the same answer.
	for i := 0; i <= len(full); i++ {
		for j := i; j <= len(full); j += 7 {
			var s StreamSplitter
			var out []byte
			for _, chunk := range []string{full[:i], full[i:j], full[j:]} {
				out = append(out, s.Write([]byte(chunk))...)
			}
			if string(out) != "\n\ncmd-out\n"+SplitMarker+"again" {
				t.Fatalf("cut %d,%d: out %q", i, j, out)
			}
			if string(s.Setup()) != "setup-out\n\n\n" {
				t.Fatalf("cut %d,%d: setup %q", i, j, s.Setup())
			}
		}
	}
	var s StreamSplitter
	if out := s.Write([]byte("no marker")); out != nil {
		t.Fatalf("emitted %q before the marker", out)
	}
	if s.Found() || s.Setup() != nil || string(s.Pending()) != "no marker" {
		t.Fatal("pending bytes lost")
	}
}

func TestShellQuote(t *testing.T) {
	got := ShellQuote([]string{"echo", "a b", "it's", "", "$HOME", "x=1"})
	want := `echo 'a b' 'it'\''s' '' '$HOME' x=1`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
