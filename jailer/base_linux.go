package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The shared base: what every jail of one program needs and no jail may change (the program, the libraries the
// loader opens for it, ld.so.cache, and --shared-ro data such as QEMU's firmware), mirrored once into a read-only
// tmpfs on the host and bound into each jail with a few recursive binds. Mirroring ~60 files per jail, two mount
// calls each, was most of what the jail added to a VM start.
const (
	baseParent   = "/run/sandglass"
	basePrefix   = "qemu-root-"
	baseReady    = ".ready"
	baseEnv      = "SANDGLASS_JAILER_BASE"
	baseRecipe   = "1"
	baseLockFile = "/run/sandglass/qemu-root.lock"
)

// sharedPaths lists what goes into the base for cfg: its program, the program's loader dependencies, the loader's
// cache when there are any, and the --shared-ro paths.
func sharedPaths(cfg *Config) ([]string, error) {
	deps, err := CachedElfDeps(depCacheFile, cfg.Argv[0], LibraryDirs("/etc/ld.so.conf"))
	if err != nil {
		return nil, err
	}
	paths := []string{cfg.Argv[0]}
	if len(deps) > 0 {
		if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
			paths = append(paths, "/etc/ld.so.cache")
		}
	}
	paths = append(paths, deps...)
	return append(paths, cfg.SharedRO...), nil
}

// baseKey names one version of the base: the paths with the stamps of what they are now, so an upgraded library
// or QEMU gets a base of its own.
func baseKey(paths []string) (string, error) {
	h := sha256.New()
	h.Write([]byte(baseRecipe))
	for _, p := range paths {
		s, ok := stamp(p)
		if !ok {
			return "", errors.New("cannot stat " + p)
		}
		b, _ := json.Marshal(s)
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ensureBase returns the base for cfg, building it on first use; it runs in the host's mount namespace (stage 1),
// where the base outlives the jailer. Concurrent jailers wait on one lock; a base left half-built is rebuilt.
func ensureBase(cfg *Config) (string, error) {
	paths, err := sharedPaths(cfg)
	if err != nil {
		return "", err
	}
	key, err := baseKey(paths)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(baseParent, basePrefix+key)
	if _, err := os.Stat(filepath.Join(dir, baseReady)); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(baseParent, 0o700); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(baseLockFile, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, baseReady)); err == nil {
		return dir, nil
	}
	// A crash mid-build leaves a tmpfs without the ready mark: detach it and start again.
	_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"); err != nil {
		return "", err
	}
	// Private: the binds made inside must not propagate to the host's peers, nor theirs in here.
	if err := syscall.Mount("", dir, "", syscall.MS_PRIVATE, ""); err != nil {
		return "", err
	}
	j := &jail{root: dir}
	for _, p := range paths {
		if err := j.mirror(p, false, 0); err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
			return "", errors.New("mirroring " + p + ": " + err.Error())
		}
	}
	if err := os.WriteFile(filepath.Join(dir, baseReady), nil, 0o600); err != nil {
		return "", err
	}
	// Read-only at the superblock: every bind of it, in every jail, is read-only too.
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"); err != nil {
		return "", err
	}
	return dir, nil
}

// validBase accepts only a base directory the jailer itself names: stage 2 gets it through its environment.
func validBase(dir string) bool {
	return filepath.Dir(dir) == baseParent && strings.HasPrefix(filepath.Base(dir), basePrefix) && filepath.Clean(dir) == dir
}

// useBase puts the base's top-level entries into the jail root: directories as recursive read-only binds, symlinks
// (such as /lib → usr/lib) as the same symlinks. Everything under a bound directory is then the base's, so a
// directory under which one of `own` lies (the VM's own paths) is not bound; those are returned, for the caller to
// mirror the shared paths under them one by one.
func (j *jail) useBase(base string, own []string) ([]string, error) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil, err
	}
	var unbound []string
	for _, e := range entries {
		name := e.Name()
		if name == baseReady {
			continue
		}
		src, dst := filepath.Join(base, name), filepath.Join(j.root, name)
		if e.Type()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(target, dst); err != nil {
				return nil, err
			}
			continue
		}
		if !e.IsDir() {
			return nil, errors.New("unexpected file at the top of the base: " + name)
		}
		top := "/" + name
		if anyUnder(own, top) {
			unbound = append(unbound, top)
			continue
		}
		if err := os.Mkdir(dst, 0o755); err != nil {
			return nil, err
		}
		if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return nil, err
		}
		if err := syscall.Mount("", dst, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
			return nil, err
		}
		j.mounted = append(j.mounted, top)
	}
	return unbound, nil
}

func anyUnder(paths []string, dir string) bool {
	for _, p := range paths {
		if under(p, dir) {
			return true
		}
	}
	return false
}
