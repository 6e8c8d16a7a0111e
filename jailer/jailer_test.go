package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func validArgs() []string {
	return []string{"--id", "sbx_1", "--uid", "2000001", "--gid", "2000001", "--cgroup", "/sys/fs/cgroup/sandglass/sbx_1",
		"--rw", "/home/x/run/sbx_1", "--as-bytes", "1000", "--", "/usr/bin/qemu-system-x86_64", "-nodefaults"}
}

func replace(args []string, flag, value string) []string {
	out := append([]string{}, args...)
	for i := range out {
		if out[i] == flag {
			out[i+1] = value
		}
	}
	return out
}

func TestParseArgsAcceptsAVmJail(t *testing.T) {
	c, err := ParseArgs(validArgs())
	if err != nil {
		t.Fatal(err)
	}
	if c.UID != 2000001 || c.Argv[0] != "/usr/bin/qemu-system-x86_64" || len(c.Argv) != 2 || c.Cgroups[0] != "/sys/fs/cgroup/sandglass/sbx_1" {
		t.Fatalf("parsed %+v", c)
	}
}

func TestParseArgsPassesMemorySettings(t *testing.T) {
	c, err := ParseArgs(append([]string{"--no-thp", "--env", "GLIBC_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=131072"}, validArgs()...))
	if err != nil {
		t.Fatal(err)
	}
	if !c.NoTHP {
		t.Fatal("--no-thp not parsed")
	}
	if c.StartOnStdin {
		t.Fatal("--start-on-stdin set without the flag")
	}
	if c, err := ParseArgs(append([]string{"--start-on-stdin"}, validArgs()...)); err != nil || !c.StartOnStdin {
		t.Fatalf("--start-on-stdin not parsed: %v", err)
	}
	if !reflect.DeepEqual(c.Env, []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=131072"}) {
		t.Fatalf("env %v", c.Env)
	}
}

func TestParseArgsFailsClosed(t *testing.T) {
	cases := map[string][]string{
		"root uid":          replace(validArgs(), "--uid", "0"),
		"system gid":        replace(validArgs(), "--gid", "100"),
		"id with a slash":   replace(validArgs(), "--id", "../x"),
		"relative rw":       replace(validArgs(), "--rw", "run/sbx_1"),
		"unclean rw":        replace(validArgs(), "--rw", "/home/x/run/../../etc"),
		"whole host":        replace(validArgs(), "--rw", "/"),
		"cgroup elsewhere":  replace(validArgs(), "--cgroup", "/tmp/cg"),
		"cgroup root":       replace(validArgs(), "--cgroup", "/sys/fs/cgroup"),
		"no as limit":       replace(validArgs(), "--as-bytes", "0"),
		"relative program":  append(validArgs()[:len(validArgs())-2], "qemu"),
		"no program":        validArgs()[:len(validArgs())-2],
		"cgroup and none":   append([]string{"--no-cgroups"}, validArgs()...),
		"too many kept fds": append([]string{"--keep-fds", "99"}, validArgs()...),
		"preload in env":    append([]string{"--env", "LD_PRELOAD=/tmp/x.so"}, validArgs()...),
		"env without value": append([]string{"--env", "GLIBC_TUNABLES"}, validArgs()...),
		"path in tunables":  append([]string{"--env", "GLIBC_TUNABLES=glibc.rtld.x=/tmp/x"}, validArgs()...),
		"env name twice":    append([]string{"--env", "GLIBC_TUNABLES=a=1", "--env", "GLIBC_TUNABLES=b=2"}, validArgs()...),
		"no cgroup, no opt-out": func() []string {
			a := validArgs()
			return append(a[:6], a[8:]...)
		}(),
	}
	for name, args := range cases {
		if _, err := ParseArgs(args); err == nil {
			t.Errorf("%s: accepted %v", name, args)
		}
	}
}

func TestPlanMountsWritableFirstAndNothingTwice(t *testing.T) {
	got := PlanMounts(
		[]string{"/h/run/vm", "/dev/shm/sg/vm.mem"},
		[]string{"/h/run/vm/base.qcow2", "/h/artifacts/t/disk.qcow2", "/usr/share/qemu", "/usr/share/qemu/bios.bin", "/h/artifacts/t/disk.qcow2", "/h/run/vmx"},
	)
	want := []Mount{
		{"/h/run/vm", true}, {"/dev/shm/sg/vm.mem", true},
		{"/h/artifacts/t/disk.qcow2", false}, {"/usr/share/qemu", false}, {"/h/run/vmx", false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
}

func TestCloexecRangesKeepOnlyTheNamedDescriptors(t *testing.T) {
	if got := CloexecRanges(0); got[0][0] != 3 || got[0][1] != ^uint(0) {
		t.Fatalf("keep none: %v", got)
	}
	if got := CloexecRanges(1); got[0][0] != 4 {
		t.Fatalf("keep fd 3: %v", got)
	}
}

func TestStatStartTimeCountsFromTheLastParenthesis(t *testing.T) {
	line := "4242 (evil) 1 2 3) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200"
	got, err := StatStartTime(line)
	if err != nil || got != "987654" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := StatStartTime("garbage"); err == nil {
		t.Fatal("accepted garbage")
	}
}

func TestMkdevMatchesTheKernelEncoding(t *testing.T) {
	if Mkdev(10, 232) != 0xae8 || Mkdev(1, 3) != 0x103 || Mkdev(259, 300) != 0x11032c {
		t.Fatalf("kvm %x null %x big %x", Mkdev(10, 232), Mkdev(1, 3), Mkdev(259, 300))
	}
}

func writeQcow2(t *testing.T, path, backing string) {
	hdr := make([]byte, 512)
	binary.BigEndian.PutUint32(hdr[0:], 0x514649fb)
	binary.BigEndian.PutUint32(hdr[4:], 3)
	if backing != "" {
		binary.BigEndian.PutUint64(hdr[8:], 200)
		binary.BigEndian.PutUint32(hdr[16:], uint32(len(backing)))
		copy(hdr[200:], backing)
	}
	if err := os.WriteFile(path, hdr, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestBackingChainFollowsHeadersToTheRawImage(t *testing.T) {
	d := t.TempDir()
	raw := filepath.Join(d, "rootfs.img")
	if err := os.WriteFile(raw, []byte("not a qcow2 image at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeQcow2(t, filepath.Join(d, "tpl.qcow2"), raw)
	writeQcow2(t, filepath.Join(d, "base.qcow2"), "tpl.qcow2")
	writeQcow2(t, filepath.Join(d, "active.qcow2"), filepath.Join(d, "base.qcow2"))
	got, err := BackingChain(filepath.Join(d, "active.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(d, "base.qcow2"), filepath.Join(d, "tpl.qcow2"), raw}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestBackingChainRefusesLoopsAndJsonNames(t *testing.T) {
	d := t.TempDir()
	a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
	writeQcow2(t, a, b)
	writeQcow2(t, b, a)
	if _, err := BackingChain(a); err == nil {
		t.Fatal("followed a loop forever")
	}
	writeQcow2(t, a, `json:{"driver":"file","filename":"/etc/shadow"}`)
	if _, err := BackingChain(a); err == nil {
		t.Fatal("accepted a json: backing name")
	}
}

func TestLibraryDirsReadsIncludesThenDefaults(t *testing.T) {
	d := t.TempDir()
	if err := os.MkdirAll(filepath.Join(d, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d, "ld.so.conf"), []byte("include conf.d/*.conf\n/opt/top # trailing comment\n"), 0o644)
	os.WriteFile(filepath.Join(d, "conf.d", "a.conf"), []byte("# x\n/opt/a\n/usr/lib\n"), 0o644)
	got := LibraryDirs(filepath.Join(d, "ld.so.conf"))
	if got[0] != "/opt/a" || got[1] != "/usr/lib" || got[2] != "/opt/top" || got[3] != "/lib/x86_64-linux-gnu" {
		t.Fatalf("got %v", got)
	}
}

// ElfDeps must name every library the loader maps: compared with ldd on a real dynamic binary of this machine.
func TestElfDepsAgreesWithLdd(t *testing.T) {
	bin := "/bin/ls"
	if _, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		bin, _ = exec.LookPath("qemu-system-x86_64")
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Skipf("no ldd: %v", err)
	}
	var want []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>":
			want = append(want, f[2])
		case len(f) == 2 && strings.HasPrefix(f[0], "/"):
			want = append(want, f[0])
		}
	}
	got, err := ElfDeps(bin, LibraryDirs("/etc/ld.so.conf"))
	if err != nil {
		t.Fatal(err)
	}
	canon := func(ps []string) []string {
		var out []string
		seen := map[string]bool{}
		for _, p := range ps {
			r, err := filepath.EvalSymlinks(p)
			if err != nil {
				t.Fatal(err)
			}
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
		sort.Strings(out)
		return out
	}
	if g, w := canon(got), canon(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("ElfDeps %v\nldd     %v", g, w)
	}
}

func TestCachedElfDepsAnswersFromCacheUntilAFileChanges(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "deps.json")
	libDirs := LibraryDirs("/etc/ld.so.conf")
	first, err := CachedElfDeps(cache, "/bin/sh", libDirs)
	if err != nil {
		t.Fatal(err)
	}
	scanned, _ := ElfDeps("/bin/sh", libDirs)
	if !sameStrings(first, scanned) {
		t.Fatalf("cache miss answered %v, scan %v", first, scanned)
	}
	// A poisoned cache whose stamps no longer match must not be believed.
	var c depCache
	b, _ := os.ReadFile(cache)
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	c.Deps = append(c.Deps, "/etc/hostname")
	c.Stamps[0].Size++
	b, _ = json.Marshal(c)
	if err := os.WriteFile(cache, b, 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := CachedElfDeps(cache, "/bin/sh", libDirs)
	if err != nil {
		t.Fatal(err)
	}
	if !sameStrings(again, scanned) {
		t.Fatalf("stale cache believed: %v", again)
	}
	// A good cache is answered without scanning: make it say something a scan never would, with valid stamps.
	c = depCache{}
	b, _ = os.ReadFile(cache)
	_ = json.Unmarshal(b, &c)
	stamps, _ := stampsOf("/bin/sh", scanned[:1])
	c.Deps, c.Stamps = scanned[:1], stamps
	b, _ = json.Marshal(c)
	_ = os.WriteFile(cache, b, 0o600)
	hit, _ := CachedElfDeps(cache, "/bin/sh", libDirs)
	if len(hit) != 1 {
		t.Fatalf("valid cache not used: %v", hit)
	}
}
