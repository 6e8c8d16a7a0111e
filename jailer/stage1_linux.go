package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"unsafe"
)

// jailRoot is the mount point of every jail's tmpfs root. Each jail mounts its own tmpfs there inside its own mount
// namespace, so they never meet; on the host it stays an empty root-only directory that no jailed path lies under.
const jailRoot = "/run/sandglass-jailer"

// Record is what a later gateway reads to recognise VMs a dead predecessor left running. A pid alone could have
// been reused; the pid with the start time the kernel reports for it names one process.
type Record struct {
	VM              string `json:"vm"`
	Instance        string `json:"instance"`
	PID             int    `json:"pid"`
	StartTime       string `json:"startTime"`
	JailerPID       int    `json:"jailerPid"`
	JailerStartTime string `json:"jailerStartTime"`
}

func stage1(cfg *Config) int {
	// The parent-death signal belongs to the thread that created the child: keep this one alive for the process's life.
	runtime.LockOSThread()
	if os.Geteuid() != 0 {
		fail("must run as root (the gateway falls back to starting QEMU without a jail when it is not root)")
	}
	// If the gateway dies, so does the jail: nothing then runs that no gateway knows about.
	if err := prctl(syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL)); err != nil {
		fail("PR_SET_PDEATHSIG: %v", err)
	}
	if os.Getppid() == 1 {
		fail("the gateway that started this jail is gone")
	}
	// Joined before the jailed process exists: it inherits the cgroup, so not one page it allocates is unaccounted.
	for _, g := range cfg.Cgroups {
		if err := os.WriteFile(filepath.Join(g, "cgroup.procs"), []byte(itoa(os.Getpid())), 0); err != nil {
			fail("VM %s: joining cgroup %s: %v (limits cannot be applied, so the VM does not start)", cfg.ID, g, err)
		}
	}
	if err := os.Mkdir(jailRoot, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		fail("creating %s: %v", jailRoot, err)
	}
	if st, err := os.Lstat(jailRoot); err != nil || !st.IsDir() || st.Sys().(*syscall.Stat_t).Uid != 0 {
		fail("%s is not a directory owned by root", jailRoot)
	}
	self, err := os.Executable()
	if err != nil {
		fail("finding the jailer binary: %v", err)
	}
	base, err := ensureBase(cfg)
	if err != nil {
		fail("VM %s: preparing the shared read-only base: %v", cfg.ID, err)
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = []string{stageEnv + "=2", baseEnv + "=" + base}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	for i := 0; i < cfg.KeepFDs; i++ {
		cmd.ExtraFiles = append(cmd.ExtraFiles, os.NewFile(uintptr(3+i), "kept"))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		fail("VM %s: starting the jail: %v", cfg.ID, err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if cfg.Record != "" {
		if err := writeRecord(cfg, cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			fail("VM %s: writing its record: %v", cfg.ID, err)
		}
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	if cfg.Record != "" {
		_ = os.Remove(cfg.Record)
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		fail("VM %s: waiting for the jail: %v", cfg.ID, err)
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		// Die of the same signal, so the gateway sees what killed QEMU (a SIGKILL from the OOM killer, an abort).
		dieOf(ws.Signal())
	}
	return ws.ExitStatus()
}

func writeRecord(cfg *Config, pid int) error {
	start, err := processStartTime(pid)
	if err != nil {
		return err
	}
	selfStart, err := processStartTime(os.Getpid())
	if err != nil {
		return err
	}
	b, _ := json.Marshal(Record{VM: cfg.ID, Instance: cfg.Instance, PID: pid, StartTime: start, JailerPID: os.Getpid(), JailerStartTime: selfStart})
	tmp := cfg.Record + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, cfg.Record)
}

// processStartTime is field 22 of /proc/<pid>/stat: clock ticks since boot when the process started.
func processStartTime(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	return StatStartTime(string(b))
}

// StatStartTime parses the start time out of a /proc/<pid>/stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from its last ')'.
func StatStartTime(stat string) (string, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", errors.New("malformed /proc stat line")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 {
		return "", errors.New("short /proc stat line")
	}
	return f[19], nil
}

func prctl(option int, arg uintptr) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, uintptr(option), arg, 0); e != 0 {
		return e
	}
	return nil
}

// sigaction is the kernel's struct sigaction on amd64, for rt_sigaction.
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// dieOf ends the process by signal sig. The Go runtime keeps its own handler for SIGABRT, SIGSEGV and the like even
// after signal.Reset, and would print a goroutine dump of the jailer over QEMU's own last words (the reason the
// gateway reports); so the default action is restored with a raw rt_sigaction first, and no core is written.
func dieOf(sig syscall.Signal) {
	signal.Reset()
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	act := sigaction{handler: 0} // SIG_DFL
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	_ = syscall.Kill(os.Getpid(), sig)
	select {}
}
