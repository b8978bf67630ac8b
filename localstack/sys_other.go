//go:build !unix

package localstack

import (
	"context"
	"os/exec"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func terminate(cmd *exec.Cmd, _ bool) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

// lockDir does not serialise installs outside Unix.
func lockDir(context.Context, string) (func(), error) { return func() {}, nil }

// lockHolder cannot tell outside Unix; dynalite's own error says it then.
func lockHolder(string) (int, error) { return 0, nil }

// lockFile does not hold a data directory outside Unix.
func lockFile(string) (func(), error) { return func() {}, nil }

// serverLockHolder cannot tell outside Unix.
func serverLockHolder(string) (int, error) { return 0, nil }
