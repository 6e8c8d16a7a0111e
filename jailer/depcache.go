package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
)

// depCacheFile keeps what the loader opens for a program between jailer runs: scanning QEMU's ELF dependencies
// (about fifty libraries) is most of the jail's start-up cost. Root-only, like the directory it lives in.
const depCacheFile = "/run/sandglass/jailer-deps.json"

// fileStamp identifies one version of a file; a package upgrade replaces files, and so changes their stamps.
type fileStamp struct {
	Path    string `json:"path"`
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtimeNs"`
}

type depCache struct {
	Program string      `json:"program"`
	LibDirs []string    `json:"libDirs"`
	Deps    []string    `json:"deps"`
	Stamps  []fileStamp `json:"stamps"`
}

func stamp(path string) (fileStamp, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStamp{}, false
	}
	return fileStamp{Path: path, Dev: st.Dev, Ino: st.Ino, Size: st.Size, MtimeNs: st.Mtim.Nano()}, true
}

// stampsOf stamps the program and every file it loads; false when one is gone.
func stampsOf(program string, deps []string) ([]fileStamp, bool) {
	out := make([]fileStamp, 0, len(deps)+1)
	for _, p := range append([]string{program}, deps...) {
		s, ok := stamp(p)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// CachedElfDeps is ElfDeps, answered from cacheFile while the program, every library it loads and the loader's
// search path are exactly as they were when it was scanned; otherwise it scans and rewrites the cache. A cache
// that cannot be read or written costs only the scan.
func CachedElfDeps(cacheFile, program string, libDirs []string) ([]string, error) {
	if b, err := os.ReadFile(cacheFile); err == nil {
		var c depCache
		if json.Unmarshal(b, &c) == nil && c.Program == program && sameStrings(c.LibDirs, libDirs) {
			if now, ok := stampsOf(program, c.Deps); ok && len(now) == len(c.Stamps) {
				same := true
				for i := range now {
					if now[i] != c.Stamps[i] {
						same = false
						break
					}
				}
				if same {
					return c.Deps, nil
				}
			}
		}
	}
	deps, err := ElfDeps(program, libDirs)
	if err != nil {
		return nil, err
	}
	if stamps, ok := stampsOf(program, deps); ok {
		if b, err := json.Marshal(depCache{Program: program, LibDirs: libDirs, Deps: deps, Stamps: stamps}); err == nil {
			writeFileAtomic(cacheFile, b)
		}
	}
	return deps, nil
}

// writeFileAtomic replaces path with data (mode 0600) through a temporary file and a rename; failures are ignored.
func writeFileAtomic(path string, data []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".jailer-deps-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		_ = os.Remove(tmp.Name())
	}
}
