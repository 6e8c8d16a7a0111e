// Tar extraction stays inside its target directory, whatever the archive or a guest program put in its way.
package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func buildTar(t *testing.T, entries []tarEntry) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Linkname: e.link, Mode: mode, Size: int64(len(e.body)), ModTime: time.Unix(1_600_000_000, 0)}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return bytes.NewReader(buf.Bytes())
}

func extractInto(t *testing.T, dir string, entries []tarEntry) (int, int64, error) {
	t.Helper()
	root, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	x := &extractor{root: root, dirs: map[string]int{}}
	defer x.closeAll()
	return x.run(buildTar(t, entries))
}

func TestExtractWritesFilesDirsAndLinks(t *testing.T) {
	dir := t.TempDir()
	n, size, err := extractInto(t, dir, []tarEntry{
		{name: "./src/", typ: tar.TypeDir, mode: 0o750},
		{name: "src/main.go", body: "package main\n", mode: 0o600},
		{name: "deep/er/file.txt", body: "made parents"},
		{name: "src/link", typ: tar.TypeSymlink, link: "main.go"},
		{name: "src/hard", typ: tar.TypeLink, link: "src/main.go"},
		{name: "run.sh", body: "#!/bin/sh\n", mode: 0o4755},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 || size != int64(len("package main\n")+len("made parents")+len("#!/bin/sh\n")) {
		t.Fatalf("entries %d size %d", n, size)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "deep/er/file.txt")); string(b) != "made parents" {
		t.Fatalf("deep file: %q", b)
	}
	st, _ := os.Stat(filepath.Join(dir, "src"))
	if st.Mode().Perm() != 0o750 {
		t.Fatalf("dir mode %v", st.Mode())
	}
	st, _ = os.Stat(filepath.Join(dir, "src/main.go"))
	if st.Mode().Perm() != 0o600 || st.ModTime().Unix() != 1_600_000_000 {
		t.Fatalf("file mode %v mtime %v", st.Mode(), st.ModTime())
	}
	if target, _ := os.Readlink(filepath.Join(dir, "src/link")); target != "main.go" {
		t.Fatalf("symlink target %q", target)
	}
	hard, _ := os.Stat(filepath.Join(dir, "src/hard"))
	if !os.SameFile(hard, st) {
		t.Fatal("hard link is not the same file")
	}
	st, _ = os.Stat(filepath.Join(dir, "run.sh"))
	if st.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("setuid lost: %v", st.Mode())
	}
}

func TestExtractRefusesToLeaveTheTarget(t *testing.T) {
	outside := t.TempDir()
	cases := map[string][]tarEntry{
		"dotdot":            {{name: "../escape", body: "x"}},
		"dotdot inside":     {{name: "a/../../escape", body: "x"}},
		"absolute":          {{name: "/escape", body: "x"}},
		"through a symlink": {{name: "out", typ: tar.TypeSymlink, link: outside}, {name: "out/escape", body: "x"}},
		"hard link out":     {{name: "h", typ: tar.TypeLink, link: "../" + filepath.Base(outside) + "/victim"}},
		"device":            {{name: "dev", typ: tar.TypeChar}},
	}
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			_, _, err := extractInto(t, dir, entries)
			pe, ok := err.(*protoError)
			if !ok || pe.Code != "bad_request" {
				t.Fatalf("want bad_request, got %v", err)
			}
			if _, err := os.Stat(filepath.Join(outside, "escape")); err == nil {
				t.Fatal("wrote outside the target")
			}
		})
	}
}

func TestExtractReplacesPlantedSymlinkInsteadOfWritingThroughIt(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, filepath.Join(dir, "f"))
	os.Symlink(outside, filepath.Join(dir, "d"))
	if _, _, err := extractInto(t, dir, []tarEntry{{name: "f", body: "new"}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("wrote through the symlink: %q", b)
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "f")); !fi.Mode().IsRegular() {
		t.Fatal("symlink was not replaced by the file")
	}
	// A directory symlink planted on the way is never entered.
	if _, _, err := extractInto(t, dir, []tarEntry{{name: "d/x", body: "x"}}); err == nil {
		t.Fatal("extracted through a planted directory symlink")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("wrote outside the target")
	}
}

func TestPackDirRoundTrips(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a/b"), 0o755)
	os.WriteFile(filepath.Join(src, "a/b/f.txt"), []byte(strings.Repeat("z", 300_000)), 0o640)
	os.Link(filepath.Join(src, "a/b/f.txt"), filepath.Join(src, "a/hard"))
	os.Symlink("b/f.txt", filepath.Join(src, "a/sym"))
	var buf bytes.Buffer
	if err := packDir(tar.NewWriter(&buf), src); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	root, _ := syscall.Open(dst, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	x := &extractor{root: root, dirs: map[string]int{}}
	n, _, err := x.run(&buf)
	x.closeAll()
	if err != nil || n != 5 {
		t.Fatalf("entries %d err %v", n, err)
	}
	b, _ := os.ReadFile(filepath.Join(dst, "a/b/f.txt"))
	if len(b) != 300_000 {
		t.Fatalf("content %d bytes", len(b))
	}
	a, _ := os.Stat(filepath.Join(dst, "a/b/f.txt"))
	h, _ := os.Stat(filepath.Join(dst, "a/hard"))
	if !os.SameFile(a, h) || a.Mode().Perm() != 0o640 {
		t.Fatal("hard link or mode not kept")
	}
	if target, _ := os.Readlink(filepath.Join(dst, "a/sym")); target != "b/f.txt" {
		t.Fatalf("symlink %q", target)
	}
}

func TestCreditQueueGrantsBackAndRefusesOversending(t *testing.T) {
	granted := 0
	q := newCreditQueue(func(n int) { granted += n })
	q.push(make([]byte, hostWindowBytes/2))
	q.push(make([]byte, hostWindowBytes/2))
	buf := make([]byte, hostWindowBytes)
	got := 0
	for got < hostWindowBytes {
		n, err := q.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	q.push(make([]byte, 1)) // the consumer took everything: credit for this is back
	if n, err := q.Read(buf); n != 1 || err != nil {
		t.Fatalf("read %d %v", n, err)
	}
	if granted < hostWindowBytes/2 {
		t.Fatalf("granted back only %d bytes", granted)
	}
	// More than the credit in flight at once (the last byte is not released until the next read): refused.
	q.push(make([]byte, hostWindowBytes))
	for {
		_, err := q.Read(buf)
		if err == nil {
			continue
		}
		if pe, ok := err.(*protoError); !ok || pe.Code != "bad_request" {
			t.Fatalf("want bad_request for oversending, got %v", err)
		}
		break
	}
}
