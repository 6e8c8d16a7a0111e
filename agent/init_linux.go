// Guest boot: the initramfs stage (/init as PID 1) and PID-1 duties in the real root filesystem.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

const (
	newRoot         = "/newroot"
	agentInRoot     = "/sbin/sandglass-agent"
	rootWaitTimeout = 10 * time.Second
)

// fatalBoot reports a boot failure on the console and exits; as PID 1 that panics the kernel,
// which ends the VM (panic=-1 / -no-reboot) instead of leaving the host waiting in silence.
func fatalBoot(format string, args ...any) {
	consoleLog("fatal: "+format, args...)
	time.Sleep(100 * time.Millisecond) // let the console drain
	os.Exit(1)
}

// runInitramfs is stage one: load modules, mount the root disk, switch into it and exec the
// agent installed there. It returns only on failure.
func runInitramfs() {
	mountOrDie("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	mountOrDie("sysfs", "/sys", "sysfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	mountOrDie("devtmpfs", "/dev", "devtmpfs", syscall.MS_NOSUID, "mode=0755")
	ensureStdio()

	if err := loadModules("/modules.order", "/modules"); err != nil {
		fatalBoot("%v", err)
	}
	rootDev := kernelArg("sandglass.root")
	if rootDev == "" {
		rootDev = "/dev/vda"
	}
	deadline := time.Now().Add(rootWaitTimeout)
	for {
		if _, err := os.Stat(rootDev); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fatalBoot("root device %s did not appear within %s", rootDev, rootWaitTimeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	mountOrDie(rootDev, newRoot, "ext4", syscall.MS_NOATIME, "")
	for _, m := range []string{"/dev", "/proc", "/sys"} {
		target := newRoot + m
		os.MkdirAll(target, 0o755)
		if err := syscall.Mount(m, target, "", syscall.MS_MOVE, ""); err != nil {
			fatalBoot("move %s to %s: %v", m, target, err)
		}
	}
	// Free the initramfs copy of modules: rootfs memory is never reclaimed otherwise.
	os.RemoveAll("/modules")

	// switch_root: the initramfs cannot be unmounted, so move the new root over it and chroot.
	if err := syscall.Chdir(newRoot); err != nil {
		fatalBoot("chdir %s: %v", newRoot, err)
	}
	if err := syscall.Mount(".", "/", "", syscall.MS_MOVE, ""); err != nil {
		fatalBoot("move %s to /: %v", newRoot, err)
	}
	if err := syscall.Chroot("."); err != nil {
		fatalBoot("chroot: %v", err)
	}
	if err := syscall.Chdir("/"); err != nil {
		fatalBoot("chdir /: %v", err)
	}
	argv := append([]string{agentInRoot}, os.Args[1:]...)
	err := syscall.Exec(agentInRoot, argv, []string{"PATH=" + basePath, "HOME=/root"})
	fatalBoot("exec %s: %v", agentInRoot, err)
}

func mountOrDie(source, target, fstype string, flags uintptr, data string) {
	os.MkdirAll(target, 0o755)
	if err := syscall.Mount(source, target, fstype, flags, data); err != nil && err != syscall.EBUSY {
		fatalBoot("mount %s on %s (%s): %v", source, target, fstype, err)
	}
}

// ensureStdio points fds 0-2 at the console when the kernel could not (no /dev/console in the
// initramfs), so later writes and children do not land on random descriptors.
func ensureStdio() {
	var st syscall.Stat_t
	if syscall.Fstat(0, &st) == nil {
		return
	}
	fd, err := syscall.Open("/dev/console", syscall.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return
	}
	for i := 0; i < 3; i++ {
		if i != fd {
			syscall.Dup2(fd, i)
		}
	}
	if fd > 2 {
		syscall.Close(fd)
	}
}

func loadModules(orderFile, dir string) error {
	f, err := os.Open(orderFile)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		path := filepath.Join(dir, filepath.Base(name))
		if err := finitModule(path); err != nil {
			return fmt.Errorf("load module %s: %w", path, err)
		}
	}
	return sc.Err()
}

func finitModule(path string) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var flags uintptr
	if strings.HasSuffix(path, ".xz") || strings.HasSuffix(path, ".zst") || strings.HasSuffix(path, ".gz") {
		flags = moduleInitCompressed
	}
	empty := []byte{0}
	_, _, errno := syscall.Syscall(sysFinitModule, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])), flags)
	if errno != 0 && errno != syscall.EEXIST { // EEXIST: built in or already loaded
		return errno
	}
	return nil
}

// setupRoot performs PID-1 duties in the real root: the mounts a userland expects, hostname, loopback,
// and keeping signals sent to PID 1 from killing the agent (which would panic the kernel).
func setupRoot() {
	os.Setenv("PATH", basePath)
	os.Setenv("HOME", "/root")
	ensureStdio()
	mountIfAbsent("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	mountIfAbsent("sysfs", "/sys", "sysfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	mountIfAbsent("devtmpfs", "/dev", "devtmpfs", syscall.MS_NOSUID, "mode=0755")
	mountIfAbsent("tmpfs", "/tmp", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777")
	mountIfAbsent("devpts", "/dev/pts", "devpts", syscall.MS_NOSUID|syscall.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5")
	mountIfAbsent("tmpfs", "/dev/shm", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777")
	mountIfAbsent("tmpfs", "/run", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755")
	// With a newinstance devpts, /dev/ptmx must lead to that instance's ptmx.
	if st, err := os.Lstat("/dev/ptmx"); err != nil || st.Mode()&os.ModeSymlink == 0 {
		os.Remove("/dev/ptmx")
		if err := os.Symlink("pts/ptmx", "/dev/ptmx"); err != nil {
			consoleLog("/dev/ptmx: %v", err)
		}
	}
	for _, l := range [][2]string{{"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"}, {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}} {
		os.Symlink(l[0], l[1])
	}
	if err := syscall.Sethostname([]byte("sandglass")); err != nil {
		consoleLog("sethostname: %v", err)
	}
	// Not fatal: without lo only the egress relay (net.listen) fails, and the host can still see why.
	if err := bringUpLoopback(); err != nil {
		consoleLog("loopback: %v", err)
	}
	// Go would exit on these by default; as PID 1 that is a kernel panic. Notify (rather than
	// Ignore) keeps children starting with default dispositions.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for range sigs {
		}
	}()
}

func mountIfAbsent(source, target, fstype string, flags uintptr, data string) {
	if isMountpoint(target) {
		return
	}
	os.MkdirAll(target, 0o755)
	if err := syscall.Mount(source, target, fstype, flags, data); err != nil {
		consoleLog("mount %s on %s: %v", fstype, target, err)
	}
}

// isMountpoint compares device numbers with the parent; enough for the fixed paths above.
func isMountpoint(path string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(path, &st) != nil || syscall.Stat(filepath.Dir(path), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// findAgentPort returns the virtio-serial port named "agent" (or sandglass.port=), waiting a
// little for the device to appear.
func findAgentPort() (string, error) {
	if p := kernelArg("sandglass.port"); p != "" {
		return p, nil
	}
	deadline := time.Now().Add(rootWaitTimeout)
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			if b, err := os.ReadFile(n); err == nil && strings.TrimSpace(string(b)) == "agent" {
				return "/dev/" + filepath.Base(filepath.Dir(n)), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no virtio-serial port named agent under /sys/class/virtio-ports")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
