package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	prSetNoNewPrivs = 38
	prSetTHPDisable = 41
	sysCloseRange   = 436
	closeRangeExec  = 1 << 2
)

// stage2 runs as PID 1 of the new namespaces, still root: it builds the jail, drops to the VM's identity and execs.
func stage2(cfg *Config) {
	must("making mounts private", syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""))
	// A small tmpfs: it holds only directories, mount points, symlinks and three device nodes.
	must("mounting the jail root", syscall.Mount("tmpfs", jailRoot, "tmpfs", syscall.MS_NOSUID, "mode=0755,size=1m,nr_inodes=4096"))
	j := &jail{root: jailRoot}

	// The program, what it loads and the shared data come from the base stage 1 prepared; the rest is this VM's.
	base := os.Getenv(baseEnv)
	if !validBase(base) {
		must("the shared base", errors.New("stage 1 named no valid base: "+base))
	}
	ro := append([]string{}, cfg.RO...)
	for _, d := range cfg.Disks {
		chain, err := BackingChain(d)
		must("reading the backing chain of "+d, err)
		ro = append(ro, chain...)
	}
	own := append(append([]string{}, cfg.RW...), ro...)
	// A top-level directory of the base that also holds one of this VM's own paths cannot be one read-only bind:
	// the shared paths under it are mirrored one by one instead, next to the VM's.
	unbound, err := j.useBase(base, own)
	must("binding the shared base", err)
	if len(unbound) > 0 {
		shared, err := sharedPaths(cfg)
		must("listing the shared paths", err)
		for _, p := range shared {
			for _, top := range unbound {
				if under(p, top) {
					ro = append(ro, p)
				}
			}
		}
	}
	for _, m := range PlanMounts(cfg.RW, ro) {
		must("mirroring "+m.Path, j.mirror(m.Path, m.Writable, 0))
	}
	j.devices(cfg)

	// pivot_root with the new root stacked over the old one, then the old one detached: nothing of the host's
	// tree stays reachable, not even through a mount point.
	must("entering the jail", syscall.Chdir(jailRoot))
	must("pivot_root", syscall.PivotRoot(".", "."))
	must("detaching the host root", syscall.Unmount(".", syscall.MNT_DETACH))
	must("chdir /", syscall.Chdir("/"))
	// The jail's own tmpfs is read-only from here: the program writes only where it was given a writable path.
	must("sealing the jail root", syscall.Mount("", "/", "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID, ""))

	for _, l := range []struct {
		res int
		max uint64
	}{{syscall.RLIMIT_NOFILE, cfg.NoFile}, {syscall.RLIMIT_CORE, 0}, {syscall.RLIMIT_AS, cfg.ASBytes}} {
		must("setting rlimits", syscall.Setrlimit(l.res, &syscall.Rlimit{Cur: l.max, Max: l.max}))
	}
	must("setgroups", syscall.Setgroups(nil))
	must("setgid", syscall.Setgid(cfg.GID))
	must("setuid", syscall.Setuid(cfg.UID))
	must("no_new_privs", prctl(prSetNoNewPrivs, 1))
	if cfg.NoTHP {
		// Inherited across execve; the kernel wants the three arguments after it zero.
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetTHPDisable, 1, 0, 0, 0, 0); e != 0 {
			must("PR_SET_THP_DISABLE", e)
		}
	}
	// Changing credentials cleared the parent-death signal; the jail still dies with stage 1.
	must("PR_SET_PDEATHSIG", prctl(syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL)))
	for _, r := range CloexecRanges(cfg.KeepFDs) {
		if _, _, e := syscall.RawSyscall(sysCloseRange, uintptr(r[0]), uintptr(r[1]), closeRangeExec); e != 0 {
			must("marking descriptors close-on-exec", e)
		}
	}
	if cfg.StartOnStdin {
		awaitStart()
	}
	err = syscall.Exec(cfg.Argv[0], cfg.Argv, append([]string{"PATH=/usr/bin:/bin"}, cfg.Env...))
	must("exec "+cfg.Argv[0], err)
}

// awaitStart blocks until the gateway says the program's files are complete (one byte on stdin). The jail is whole
// by now: nothing below changes what the program can reach. EOF or an error means the gateway gave up, and the
// program never runs. The program's stdin is then the jail's /dev/null, never the gateway's pipe.
func awaitStart() {
	var b [1]byte
	for {
		n, err := syscall.Read(0, b[:])
		if err == syscall.EINTR {
			continue
		}
		if n != 1 {
			fail("the gateway did not release the program (stdin: %d bytes, %v)", n, err)
		}
		break
	}
	null, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	must("opening /dev/null", err)
	must("stdin from /dev/null", syscall.Dup3(null, 0, 0))
	must("closing /dev/null", syscall.Close(null))
}

func must(what string, err error) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

type jail struct {
	root    string
	mounted []string
}

const maxSymlinks = 40

// mirror makes host path p visible in the jail at p: every directory on the way is created in the jail's tmpfs,
// every symlink on the way is recreated with the same target (and that target mirrored in turn), and the final file
// or directory is bind-mounted, read-only unless writable. Paths already visible through an earlier bind are left
// alone: creating anything there would write to the host.
func (j *jail) mirror(p string, writable bool, links int) error {
	if links > maxSymlinks {
		return errors.New("too many symlinks")
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	for i, part := range parts {
		next := filepath.Join(cur, part)
		if j.covered(next) {
			return nil
		}
		st, err := os.Lstat(next)
		if err != nil {
			return err
		}
		in := filepath.Join(j.root, next)
		last := i == len(parts)-1
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, in); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			rest := append([]string{filepath.Clean(target)}, parts[i+1:]...)
			return j.mirror(filepath.Join(rest...), writable, links+1)
		case !last:
			if !st.IsDir() {
				return syscall.ENOTDIR
			}
			if err := os.Mkdir(in, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		default:
			if st.IsDir() {
				if err := os.Mkdir(in, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
					return err
				}
			} else {
				f, err := os.OpenFile(in, os.O_CREATE|os.O_WRONLY, 0o600)
				if err != nil {
					return err
				}
				f.Close()
			}
			return j.bind(next, in, writable)
		}
		cur = next
	}
	return nil
}

func (j *jail) covered(p string) bool {
	for _, m := range j.mounted {
		if under(p, m) {
			return true
		}
	}
	return false
}

func (j *jail) bind(src, dst string, writable bool) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		return err
	}
	// A bind mount takes its flags only on a remount. Nothing in the jail is setuid or a device it may open;
	// writable paths hold data only, never anything to execute.
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_NOSUID | syscall.MS_NODEV)
	if writable {
		flags |= syscall.MS_NOEXEC
	} else {
		flags |= syscall.MS_RDONLY
	}
	if err := syscall.Mount("", dst, "", flags, ""); err != nil {
		return err
	}
	j.mounted = append(j.mounted, src)
	return nil
}

// devices creates the only device nodes a VM needs, owned by its uid: this is how QEMU opens /dev/kvm whatever
// the host's /dev/kvm owner and mode are, without any group membership.
func (j *jail) devices(cfg *Config) {
	dev := filepath.Join(j.root, "dev")
	// It may exist already: the RAM file lives under /dev/shm.
	if err := os.Mkdir(dev, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		must("creating /dev", err)
	}
	nodes := []struct {
		name         string
		major, minor uint32
		mode         uint32
	}{{"null", 1, 3, 0o666}, {"urandom", 1, 9, 0o444}}
	if cfg.KVM {
		nodes = append(nodes, struct {
			name         string
			major, minor uint32
			mode         uint32
		}{"kvm", 10, 232, 0o600})
	}
	for _, n := range nodes {
		path := filepath.Join(dev, n.name)
		must("mknod /dev/"+n.name, syscall.Mknod(path, syscall.S_IFCHR|n.mode, int(Mkdev(n.major, n.minor))))
		must("chown /dev/"+n.name, os.Chown(path, cfg.UID, cfg.GID))
		must("chmod /dev/"+n.name, os.Chmod(path, os.FileMode(n.mode)))
	}
}

// Mkdev encodes a device number the way the kernel's new_encode_dev does.
func Mkdev(major, minor uint32) uint64 {
	return uint64(minor&0xff) | uint64(major&0xfff)<<8 | uint64(minor&^0xff)<<12 | uint64(major&^0xfff)<<32
}
