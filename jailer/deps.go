package main

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// LibraryDirs is where the dynamic loader looks for libraries when it has no cache: the jail has no
// /etc/ld.so.cache, so every library is found (by the loader, and by ElfDeps for the mounts) in these, in order.
func LibraryDirs(ldSoConf string) []string {
	dirs := []string{}
	seen := map[string]bool{}
	add := func(d string) {
		d = filepath.Clean(d)
		if filepath.IsAbs(d) && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	var readConf func(path string, depth int)
	readConf = func(path string, depth int) {
		f, err := os.Open(path)
		if err != nil || depth > 4 {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = strings.TrimSpace(line[:i])
			}
			if line == "" {
				continue
			}
			if strings.HasPrefix(line, "include ") {
				pattern := strings.TrimSpace(strings.TrimPrefix(line, "include "))
				if !filepath.IsAbs(pattern) {
					pattern = filepath.Join(filepath.Dir(path), pattern)
				}
				matches, _ := filepath.Glob(pattern)
				for _, m := range matches {
					readConf(m, depth+1)
				}
				continue
			}
			add(line)
		}
	}
	readConf(ldSoConf, 0)
	// The loader's built-in trusted directories come after the configured ones.
	for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		add(d)
	}
	return dirs
}

// ElfDeps lists what the loader opens to start the program at path: its interpreter and every shared library it
// needs, transitively, by the path the loader will find it under. A static binary needs nothing.
func ElfDeps(path string, libDirs []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	var visit func(file string) error
	visit = func(file string) error {
		f, err := elf.Open(file)
		if err != nil {
			return fmt.Errorf("reading %s: %w", file, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return fmt.Errorf("reading the interpreter of %s: %w", file, err)
			}
			interp := strings.TrimRight(string(b), "\x00")
			if !seen[interp] {
				seen[interp] = true
				out = append(out, interp)
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("reading the libraries of %s: %w", file, err)
		}
		dirs := libDirs
		if rp, _ := f.DynString(elf.DT_RUNPATH); len(rp) > 0 {
			dirs = append(expandOrigin(rp, file), libDirs...)
		} else if rp, _ := f.DynString(elf.DT_RPATH); len(rp) > 0 {
			dirs = append(expandOrigin(rp, file), libDirs...)
		}
		for _, lib := range needed {
			found := ""
			for _, d := range dirs {
				cand := filepath.Join(d, lib)
				if st, err := os.Stat(cand); err == nil && st.Mode().IsRegular() {
					found = cand
					break
				}
			}
			if found == "" {
				return fmt.Errorf("%s needs %s, found in none of %s", file, lib, strings.Join(dirs, ":"))
			}
			if seen[found] {
				continue
			}
			seen[found] = true
			out = append(out, found)
			if err := visit(found); err != nil {
				return err
			}
		}
		return nil
	}
	return out, visit(path)
}

func expandOrigin(paths []string, file string) []string {
	var out []string
	for _, p := range paths {
		for _, d := range strings.Split(p, ":") {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", "$ORIGIN"), "$ORIGIN", filepath.Dir(file))
			if filepath.IsAbs(d) {
				out = append(out, filepath.Clean(d))
			}
		}
	}
	return out
}

const maxBackingDepth = 16

// BackingChain lists the backing files below a qcow2 image, nearest first (a raw image has none). QEMU opens them by
// the names recorded in each header, which is why the jail keeps host paths.
func BackingChain(image string) ([]string, error) {
	var chain []string
	cur := image
	for i := 0; ; i++ {
		next, err := qcow2Backing(cur)
		if err != nil {
			return nil, err
		}
		if next == "" {
			return chain, nil
		}
		if i == maxBackingDepth {
			return nil, fmt.Errorf("%s: backing chain deeper than %d", image, maxBackingDepth)
		}
		chain = append(chain, next)
		cur = next
	}
}

// qcow2Backing reads the backing file name from a qcow2 header; "" for a raw image or one without a backing file.
func qcow2Backing(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var hdr [20]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return "", nil
		}
		return "", err
	}
	if binary.BigEndian.Uint32(hdr[0:4]) != 0x514649fb {
		return "", nil
	}
	off := binary.BigEndian.Uint64(hdr[8:16])
	size := binary.BigEndian.Uint32(hdr[16:20])
	if off == 0 || size == 0 {
		return "", nil
	}
	if size > 1023 {
		return "", fmt.Errorf("%s: backing file name of %d bytes", path, size)
	}
	name := make([]byte, size)
	if _, err := f.ReadAt(name, int64(off)); err != nil {
		return "", fmt.Errorf("%s: reading the backing file name: %w", path, err)
	}
	b := string(name)
	if strings.HasPrefix(b, "json:") || strings.ContainsRune(b, 0) {
		return "", fmt.Errorf("%s: backing file %q is not a plain path", path, b)
	}
	if !filepath.IsAbs(b) {
		b = filepath.Join(filepath.Dir(path), b)
	}
	return filepath.Clean(b), nil
}
