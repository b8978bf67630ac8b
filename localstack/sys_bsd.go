//go:build unix && !linux

package localstack

import "syscall"

// sysProcAttr puts the server in its own process group, so Stop ends all of
// it. Outside Linux there is no parent-death signal: a parent killed with
// SIGKILL leaves the server running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
