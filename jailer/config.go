package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Config is one jail: who the program runs as, what it may see, and what it may use. The gateway builds it per VM
// (packages/vmm/src/jail.ts); both stages parse the same arguments, so stage 2 needs no other channel.
type Config struct {
	ID  string
	UID int
	GID int
	// Cgroup directories whose cgroup.procs the jailer joins before it creates the jailed process (one on cgroup v2,
	// one per controller on v1). Empty only with NoCgroups, which the gateway passes for SANDGLASS_CGROUPS=off.
	Cgroups   []string
	NoCgroups bool
	// Host paths mirrored into the jail at the same absolute path: RW only the VM's own run directory and RAM file.
	RW []string
	RO []string
	// Read-only paths every jail of this program shares (QEMU's firmware and modules): they go into the shared base.
	SharedRO []string
	// qcow2 images whose backing chains are mirrored read-only (the images themselves are under an RW path).
	Disks []string
	// Create /dev/kvm in the jail, owned by the jailed uid.
	KVM      bool
	NoFile   uint64
	ASBytes  uint64
	KeepFDs  int
	Record   string
	Instance string
	// Transparent huge pages off for the program (PR_SET_THP_DISABLE): QEMU asks for them on its TCG code buffer and
	// RAM blocks, and a huge page is resident whole however little of it is used.
	NoTHP bool
	// Build the whole jail, then wait for one byte on stdin before the exec: the gateway starts the jail while it still
	// fills the VM's RAM file, and releases the program once the file is whole. EOF instead ends the jail unrun.
	StartOnStdin bool
	// NAME=VALUE pairs the program gets besides PATH; only names in allowedEnv (how QEMU's allocator behaves).
	Env  []string
	Argv []string
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// allowedEnv names the variables --env may set. Anything else (LD_PRELOAD, LD_LIBRARY_PATH, QEMU's own) could change
// what runs inside the jail, so it is refused rather than passed on.
var allowedEnv = map[string]bool{"GLIBC_TUNABLES": true}

// A tunables string is glibc's name=value:name=value list: nothing in it can be a path or a shell word.
var envValuePattern = regexp.MustCompile(`^[A-Za-z0-9_.=:]{0,256}$`)

// The jailed uid and gid are never root's, nor a system account's: a typo must not hand QEMU a real identity.
const minJailID = 1000

// ParseArgs reads `sandglass-jailer [options] -- program [args…]`.
func ParseArgs(args []string) (*Config, error) {
	fs := flag.NewFlagSet("sandglass-jailer", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &Config{}
	var cgroups, rw, ro, sharedRO, disks, env listFlag
	fs.StringVar(&c.ID, "id", "", "VM id (names the jail in messages and records)")
	fs.IntVar(&c.UID, "uid", -1, "uid the program runs as")
	fs.IntVar(&c.GID, "gid", -1, "gid the program runs as")
	fs.Var(&cgroups, "cgroup", "cgroup directory to join before the jailed process exists (repeatable)")
	fs.BoolVar(&c.NoCgroups, "no-cgroups", false, "run without cgroup limits (development only)")
	fs.Var(&rw, "rw", "host path mirrored read-write (repeatable)")
	fs.Var(&ro, "ro", "host path mirrored read-only (repeatable)")
	fs.Var(&sharedRO, "shared-ro", "host path mirrored read-only, the same for every jail of this program (repeatable)")
	fs.Var(&disks, "disk", "qcow2 image whose backing chain is mirrored read-only (repeatable)")
	fs.BoolVar(&c.KVM, "kvm", false, "create /dev/kvm in the jail")
	fs.Uint64Var(&c.NoFile, "nofile", 1024, "RLIMIT_NOFILE")
	fs.Uint64Var(&c.ASBytes, "as-bytes", 0, "RLIMIT_AS in bytes")
	fs.IntVar(&c.KeepFDs, "keep-fds", 0, "file descriptors from 3 up passed on to the program (3 … 3+n-1)")
	fs.StringVar(&c.Record, "record", "", "file the jailer writes its VM record to (pid, start time, instance)")
	fs.StringVar(&c.Instance, "instance", "", "id of the gateway instance that owns the VM")
	fs.BoolVar(&c.NoTHP, "no-thp", false, "no transparent huge pages for the program (PR_SET_THP_DISABLE)")
	fs.BoolVar(&c.StartOnStdin, "start-on-stdin", false, "build the jail, then exec only after one byte arrives on stdin")
	fs.Var(&env, "env", "NAME=VALUE in the program's environment, NAME one of allowedEnv (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.Cgroups, c.RW, c.RO, c.SharedRO, c.Disks, c.Env = cgroups, rw, ro, sharedRO, disks, env
	c.Argv = fs.Args()
	return c, c.Validate()
}

// Validate refuses anything that would make the jail weaker than asked: it fails closed.
func (c *Config) Validate() error {
	if !idPattern.MatchString(c.ID) {
		return fmt.Errorf("--id %q: want 1-64 of [A-Za-z0-9_-]", c.ID)
	}
	if c.UID < minJailID || c.GID < minJailID {
		return fmt.Errorf("--uid %d / --gid %d: both must be at least %d", c.UID, c.GID, minJailID)
	}
	if len(c.Cgroups) == 0 && !c.NoCgroups {
		return errors.New("no --cgroup given: limits cannot be applied (only --no-cgroups turns them off)")
	}
	if len(c.Cgroups) > 0 && c.NoCgroups {
		return errors.New("--cgroup and --no-cgroups together")
	}
	for _, g := range c.Cgroups {
		if err := cleanAbs("--cgroup", g); err != nil {
			return err
		}
		if !under(g, "/sys/fs/cgroup") || g == "/sys/fs/cgroup" {
			return fmt.Errorf("--cgroup %s is not a cgroup below /sys/fs/cgroup", g)
		}
	}
	for _, set := range []struct {
		name  string
		paths []string
	}{{"--rw", c.RW}, {"--ro", c.RO}, {"--disk", c.Disks}} {
		for _, p := range set.paths {
			if err := cleanAbs(set.name, p); err != nil {
				return err
			}
			if p == "/" {
				return fmt.Errorf("%s /: the whole host is not a jail", set.name)
			}
		}
	}
	if c.ASBytes == 0 {
		return errors.New("--as-bytes is required (address-space limit sized from guest RAM)")
	}
	if c.NoFile < 16 {
		return fmt.Errorf("--nofile %d is too small to run anything", c.NoFile)
	}
	if c.KeepFDs < 0 || c.KeepFDs > 16 {
		return fmt.Errorf("--keep-fds %d: want 0-16", c.KeepFDs)
	}
	if c.Record != "" {
		if err := cleanAbs("--record", c.Record); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, kv := range c.Env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !allowedEnv[name] || seen[name] || !envValuePattern.MatchString(value) {
			return fmt.Errorf("--env %q: want NAME=VALUE once per name, NAME one of GLIBC_TUNABLES, VALUE of [A-Za-z0-9_.=:]", kv)
		}
		seen[name] = true
	}
	if len(c.Argv) == 0 {
		return errors.New("no program after --")
	}
	if err := cleanAbs("program", c.Argv[0]); err != nil {
		return err
	}
	return nil
}

func cleanAbs(what, p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%s %q: want a clean absolute path", what, p)
	}
	return nil
}

// under reports whether p is dir or inside it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// Mount is one host path made visible in the jail at the same path.
type Mount struct {
	Path     string
	Writable bool
}

// PlanMounts orders the jail's bind mounts: writable ones first, then read-only ones, each path once. A path inside
// one already mounted is visible through it (and must not be bound over: a read-only bind inside the VM's run
// directory would break writes QEMU needs, such as merging a disk layer), so it is dropped.
func PlanMounts(rw, ro []string) []Mount {
	var out []Mount
	covered := func(p string) bool {
		for _, m := range out {
			if under(p, m.Path) {
				return true
			}
		}
		return false
	}
	for _, set := range []struct {
		paths    []string
		writable bool
	}{{rw, true}, {ro, false}} {
		for _, p := range set.paths {
			if !covered(p) {
				out = append(out, Mount{Path: p, Writable: set.writable})
			}
		}
	}
	return out
}

// CloexecRanges are the descriptor ranges to mark close-on-exec so that only 0-2 and 3 … 3+keep-1 survive exec.
func CloexecRanges(keep int) [][2]uint {
	return [][2]uint{{uint(3 + keep), ^uint(0)}}
}

func itoa(n int) string { return strconv.Itoa(n) }
