package backend

import (
	"bytes"
	"strings"
)

// EntryScriptName is the file name of the entry script (reference §1.5).
const EntryScriptName = "HANDLE_ENTRY.sh"

// SplitMarker separates setup output from command output. The entry script
// echoes it to stderr and then to stdout after the setup commands.
const SplitMarker = "_____STARTING COMMAND_____"

// SetupCommands returns the setup commands in the order the entry script
// runs them: s.Commands, then s.EvalCommands (only in ContextEvaluation),
// then s.Command when it is not empty.
func SetupCommands(s Setup, ctx Context) []string {
	cmds := make([]string, 0, len(s.Commands)+len(s.EvalCommands)+1)
	cmds = append(cmds, s.Commands...)
	if ctx == ContextEvaluation {
		cmds = append(cmds, s.EvalCommands...)
	}
	if s.Command != "" {
		cmds = append(cmds, s.Command)
	}
	return cmds
}

// FormatSetupCommands renders setup commands for the entry script: "" for
// none, else the commands one per line followed by a blank line.
func FormatSetupCommands(cmds []string) string {
	if len(cmds) == 0 {
		return ""
	}
	return strings.Join(cmds, "\n") + "\n\n"
}

// EntryScript returns the bytes of HANDLE_ENTRY.sh for the given setup
// commands and command, byte for byte what the reference renders. Setup
// commands are written verbatim with no "set -e", so a failing setup command
// does not stop the command; the script's exit status is the command's.
func EntryScript(setup []string, command string) []byte {
	var b bytes.Buffer
	b.WriteString("#!/bin/sh\n")
	b.WriteString(FormatSetupCommands(setup))
	b.WriteString("\necho \"\n\n" + SplitMarker + "\n\" >&2\n")
	b.WriteString("echo \"\n\n" + SplitMarker + "\n\"\n")
	b.WriteString(command)
	b.WriteString("\n")
	return b.Bytes()
}

// SplitBuffered splits one buffered stream at the LAST marker, as the
// reference's split_setup_output does: the parts before it are joined with
// "\n" into setup and the part after it is the command output. Without a
// marker setup is "" and everything is command output. Nothing is trimmed.
func SplitBuffered(text string) (setup, cmd string) {
	parts := strings.Split(text, SplitMarker)
	last := len(parts) - 1
	return strings.Join(parts[:last], "\n"), parts[last]
}

// SplitFirst splits at the FIRST marker, as streaming does. Without a marker
// setup is "" and everything is command output.
func SplitFirst(text string) (setup, cmd string) {
	before, after, found := strings.Cut(text, SplitMarker)
	if !found {
		return "", text
	}
	return before, after
}

// ShellQuote joins argv into one /bin/sh command line, quoting every word
// that needs it, so an argv request can run through the entry script.
func ShellQuote(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = quoteWord(a)
	}
	return strings.Join(words, " ")
}

func quoteWord(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// StreamSplitter implements the streaming side of the marker contract for one
// stream of raw bytes. Bytes are withheld until the first marker has been
// seen; from then on everything after that first marker passes through. The
// marker is ASCII, so splitting raw bytes never cuts a UTF-8 sequence.
//
// The zero value is ready to use. It is not safe for concurrent use.
type StreamSplitter struct {
	pre   []byte // everything before the marker (and, until found, the undecided tail)
	found bool
}

// DropSetup forgets the bytes before the marker once the caller has them.
func (s *StreamSplitter) DropSetup() { s.pre = nil }

// Write consumes a chunk and returns the command bytes it contains: nil
// while the marker has not appeared, then the remainder after the first
// marker, then whole chunks. The returned slice may alias p.
func (s *StreamSplitter) Write(p []byte) []byte {
	if s.found {
		return p
	}
	// Only the last len(marker)-1 bytes of what came before can start a
	// marker that ends in p.
	start := len(s.pre) - (len(SplitMarker) - 1)
	if start < 0 {
		start = 0
	}
	s.pre = append(s.pre, p...)
	i := bytes.Index(s.pre[start:], []byte(SplitMarker))
	if i < 0 {
		return nil
	}
	cut := start + i
	rest := append([]byte(nil), s.pre[cut+len(SplitMarker):]...)
	s.pre = s.pre[:cut]
	s.found = true
	return rest
}

// Found reports whether the marker has been seen.
func (s *StreamSplitter) Found() bool { return s.found }

// Setup returns the bytes before the first marker once it has been seen.
// When the marker never arrives it returns nil and Pending returns
// everything, which per the reference is command output, not setup output.
func (s *StreamSplitter) Setup() []byte {
	if !s.found {
		return nil
	}
	return s.pre
}

// Pending returns the bytes withheld because no marker has been seen (nil
// once it has).
func (s *StreamSplitter) Pending() []byte {
	if s.found {
		return nil
	}
	return s.pre
}
