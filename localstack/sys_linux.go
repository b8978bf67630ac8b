package localstack

import "syscall"

// sysProcAttr puts the server in its own process group, so Stop ends all of
// it, and has the kernel kill it when the thread that started it dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
