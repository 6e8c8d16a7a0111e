// Owner names for metadata and owner= on file.write/file.mkdir, through a real protocol connection.
package main

import (
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

func TestIDNamesParseAndReloadOnChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	os.WriteFile(path, []byte("# comment\nroot:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\nbroken\nalias:x:1000:1000::/:/bin/sh\n"), 0o644)
	n := &idNames{path: path}
	got := n.current()
	if got[0] != "root" || got[1000] != "user" || len(got) != 2 {
		t.Fatalf("names %v: want root and the first name of uid 1000", got)
	}
	os.WriteFile(path, []byte("root:x:0:0:root:/root:/bin/bash\nsomeone:x:1001:1001::/:/bin/sh\n"), 0o644)
	// A rewrite within the file system's timestamp granularity still changes the size here.
	got = n.current()
	if got[1001] != "someone" || got[1000] != "" {
		t.Fatalf("names after the rewrite %v: the change was not picked up", got)
	}
	os.Remove(path)
	if got := n.current(); len(got) != 0 {
		t.Fatalf("names of a missing file %v, want none", got)
	}
}

// nobody is a non-root user of the test host; chowning to it needs root.
func nobody(t *testing.T) (uid, gid uint32) {
	if os.Getuid() != 0 {
		t.Skip("chown needs root")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody on this host")
	}
	a, _ := strconv.Atoi(u.Uid)
	b, _ := strconv.Atoi(u.Gid)
	return uint32(a), uint32(b)
}

func ownerOf(t *testing.T, path string) (uint32, uint32) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return s.Uid, s.Gid
}

// writeFile runs a whole file.write and waits for its outcome event.
func (h *testHost) writeFile(streamID uint32, params map[string]any, data string) map[string]any {
	h.t.Helper()
	params["streamId"] = streamID
	if _, e := h.call("file.write", params); e != nil {
		return map[string]any{"event": "reply", "error": e.Code}
	}
	h.send(frameData, streamID, []byte(data))
	h.send(frameEnd, streamID, nil)
	f := h.waitFor("file.write outcome", func(f frame) bool {
		var ev map[string]any
		json.Unmarshal(f.payload, &ev)
		return f.typ == frameEvent && ev["streamId"] == float64(streamID)
	})
	var ev map[string]any
	json.Unmarshal(f.payload, &ev)
	return ev
}

func TestWriteAndMkdirWithOwner(t *testing.T) {
	uid, gid := nobody(t)
	h := startTestAgent(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "a", "b", "f.txt")
	ev := h.writeFile(1, map[string]any{"path": target, "owner": "nobody", "mode": 0o4755}, "hi")
	if ev["event"] != "file.written" {
		t.Fatalf("file.write: %v", ev)
	}
	for _, p := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "a", "b"), target} {
		if u, g := ownerOf(t, p); u != uid || g != gid {
			t.Fatalf("%s owned by %d:%d, want nobody %d:%d", p, u, g, uid, gid)
		}
	}
	if st, _ := os.Stat(target); st.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("mode %v: the chown cleared the setuid bit the caller asked for", st.Mode())
	}
	if u, _ := ownerOf(t, dir); u != uint32(os.Getuid()) {
		t.Fatalf("the existing parent %s was chowned", dir)
	}

	res, e := h.call("file.stat", map[string]any{"path": target})
	if e != nil {
		t.Fatal(e)
	}
	var st struct {
		UID, GID     uint32
		Owner, Group string
	}
	json.Unmarshal(res, &st)
	if st.UID != uid || st.Owner != "nobody" || st.GID != gid {
		t.Fatalf("file.stat %s: want uid %d owner nobody", res, uid)
	}

	// By numeric uid, a new tree; the directory that already existed keeps its owner.
	deep := filepath.Join(dir, "a", "c", "d")
	if _, e := h.call("file.mkdir", map[string]any{"path": deep, "owner": strconv.Itoa(int(uid))}); e != nil {
		t.Fatal(e)
	}
	for _, p := range []string{filepath.Join(dir, "a", "c"), deep} {
		if u, _ := ownerOf(t, p); u != uid {
			t.Fatalf("%s owned by %d, want %d", p, u, uid)
		}
	}
	plain := filepath.Join(dir, "plain")
	h.call("file.mkdir", map[string]any{"path": plain})
	if u, _ := ownerOf(t, plain); u != uint32(os.Getuid()) {
		t.Fatalf("mkdir without owner gave owner %d", u)
	}

	// An unknown user changes nothing.
	if _, e := h.call("file.mkdir", map[string]any{"path": filepath.Join(dir, "x"), "owner": "no-such-user"}); e == nil || e.Code != "bad_request" {
		t.Fatalf("unknown owner: %v, want bad_request", e)
	}
	if ev := h.writeFile(2, map[string]any{"path": filepath.Join(dir, "y", "f"), "owner": "no-such-user"}, "x"); ev["error"] != "bad_request" {
		t.Fatalf("write with an unknown owner: %v, want bad_request", ev)
	}
	for _, p := range []string{"x", "y"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Fatalf("%s exists after a refused call", p)
		}
	}
}

func TestMkdirChainDoesNotFollowASwappedDirectory(t *testing.T) {
	dir := t.TempDir()
	os.Symlink("/", filepath.Join(dir, "link"))
	// Components that existed are followed: a path through a symlink to a directory works like mkdir -p.
	if _, err := mkdirChain(filepath.Join(dir, "link", dir[1:], "through"), true, nil); err != nil {
		t.Fatalf("mkdir through an existing link: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "through")); err != nil || !st.IsDir() {
		t.Fatalf("through the link: %v", err)
	}
	// A file where a directory should be.
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
	if _, err := mkdirChain(filepath.Join(dir, "file", "sub"), true, nil); mapErr(err).Code != "not_a_directory" {
		t.Fatalf("mkdir below a file: %v", err)
	}
}
