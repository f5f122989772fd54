package backend

import (
	"errors"
	"io/fs"
	"os/exec"
	"syscall"
)

// Exit codes shells and Docker use for failures to start a command.
const (
	ExitNotExecutable = 126 // found but cannot be executed
	ExitNotFound      = 127 // command not found
	ExitSignalBase    = 128 // 128+N: killed by signal N
)

// ExitCodeFor maps the error of starting or waiting for a process to a shell
// style exit code: 0 for nil, the exit status, 128+N when killed by signal
// N, 127 when the command does not exist, 126 when it is not executable.
// It returns -1 for an error it cannot classify.
func ExitCodeFor(err error) int {
	if err == nil {
		return 0
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ExitSignalBase + int(ws.Signal())
		}
		return exitErr.ExitCode()
	}
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return ExitNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR):
		return ExitNotExecutable
	}
	return -1
}
