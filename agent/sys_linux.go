// Linux system calls the agent needs beyond package os: clock, entropy, loopback, reaping, console logging.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"unsafe"
)

const (
	ioctlRndAddEntropy   = 0x40085203 // _IOW('R', 0x03, int[2])
	ioctlRndReseedCrng   = 0x5207     // _IO('R', 0x07)
	sysFinitModule       = 313        // amd64
	moduleInitCompressed = 4          // MODULE_INIT_COMPRESSED_FILE: the kernel decompresses .ko.xz/.zst
)

func setRealtimeClock(unixNs int64) error {
	ts := syscall.NsecToTimespec(unixNs)
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_SETTIME, 0 /* CLOCK_REALTIME */, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// addEntropy credits host randomness to the kernel pool and forces the CRNG to reseed from it,
// so VMs restored from one snapshot stop sharing random state immediately.
func addEntropy(b []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(b)+3)
	*(*int32)(unsafe.Pointer(&info[0])) = int32(len(b) * 8)
	*(*int32)(unsafe.Pointer(&info[4])) = int32(len(b))
	copy(info[8:], b)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), ioctlRndAddEntropy, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", errno)
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), ioctlRndReseedCrng, 0); errno != 0 {
		return fmt.Errorf("RNDRESEEDCRNG: %w", errno)
	}
	return nil
}

// bringUpLoopback sets IFF_UP on lo, which makes the kernel assign 127.0.0.1 and ::1. The guest
// has no other interface: programs reach the outside only through the agent's relay on lo.
func bringUpLoopback() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	// struct ifreq: char ifr_name[IFNAMSIZ]; then a union whose short ifr_flags is what we need.
	var ifr [40]byte
	copy(ifr[:syscall.IFNAMSIZ-1], "lo")
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
		return fmt.Errorf("SIOCGIFFLAGS lo: %w", errno)
	}
	flags := *(*uint16)(unsafe.Pointer(&ifr[syscall.IFNAMSIZ]))
	if flags&syscall.IFF_UP != 0 {
		return nil
	}
	*(*uint16)(unsafe.Pointer(&ifr[syscall.IFNAMSIZ])) = flags | syscall.IFF_UP
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
		return fmt.Errorf("SIOCSIFFLAGS lo: %w", errno)
	}
	return nil
}

// reapLoop is the only caller of wait4 in the agent: it reaps every child (ours and, as PID 1,
// orphans) and hands statuses of our processes to them by pid. Using os/exec's Wait anywhere
// would race with it.
func (a *agent) reapLoop() {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGCHLD)
	a.reap() // children that exited before Notify
	for range ch {
		a.reap()
	}
}

func (a *agent) reap() {
	a.forkMu.Lock()
	defer a.forkMu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if p := a.byPid[pid]; p != nil {
			delete(a.byPid, pid)
			p.onReaped(ws)
		}
	}
}

// consoleLog writes a line where a VM's console log captures it; in init mode that is the only
// way a failed boot can be diagnosed from the host.
func consoleLog(format string, args ...any) {
	consoleLine("sandglass-agent: " + fmt.Sprintf(format, args...))
}

func consoleLine(line string) {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, line)
		return
	}
	if f, err := os.OpenFile("/dev/console", os.O_WRONLY|syscall.O_NOCTTY, 0); err == nil {
		fmt.Fprintln(f, line)
		f.Close()
		return
	}
	if f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0); err == nil {
		fmt.Fprintf(f, "<3>%s\n", line)
		f.Close()
	}
}

// kernelArg returns the value of name=value on the kernel command line.
func kernelArg(name string) string {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(string(b)) {
		if strings.HasPrefix(f, name+"=") {
			return f[len(name)+1:]
		}
	}
	return ""
}
