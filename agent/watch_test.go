// fs.watch through a real protocol connection: op mapping, relative names, recursion, unwatch and reset.
package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

type fsEventMsg struct {
	Event   string `json:"event"`
	WatchID string `json:"watchId"`
	Name    string `json:"name"`
	Op      string `json:"op"`
}

// nextFsEvent returns the next fs.event of watchId.
func (h *testHost) nextFsEvent(watchID string) fsEventMsg {
	h.t.Helper()
	var ev fsEventMsg
	h.waitFor("fs.event of "+watchID, func(f frame) bool {
		if f.typ != frameEvent {
			return false
		}
		var e fsEventMsg
		json.Unmarshal(f.payload, &e)
		if e.Event == "fs.event" && e.WatchID == watchID {
			ev = e
			return true
		}
		return false
	})
	return ev
}

// expectFsEvent skips this watch's events until name/op arrives, failing on an event for an unexpected name.
func (h *testHost) expectFsEvent(watchID, name, op string, allowed ...string) {
	h.t.Helper()
	for {
		ev := h.nextFsEvent(watchID)
		if ev.Name == name && ev.Op == op {
			return
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == ev.Name
		}
		if !ok {
			h.t.Fatalf("waiting for %s %s on %s: got %+v", op, name, watchID, ev)
		}
	}
}

func TestOpMapping(t *testing.T) {
	cases := map[uint32]string{
		syscall.IN_CREATE: "create", syscall.IN_MOVED_TO: "create", syscall.IN_CREATE | syscall.IN_ISDIR: "create",
		syscall.IN_CLOSE_WRITE: "write", syscall.IN_MODIFY: "write", syscall.IN_DELETE: "remove",
		syscall.IN_MOVED_FROM: "rename", syscall.IN_ATTRIB: "chmod", syscall.IN_OPEN: "",
	}
	for mask, want := range cases {
		if got := opOf(mask); got != want {
			t.Errorf("opOf(%#x) = %q, want %q", mask, got, want)
		}
	}
	for name, want := range map[string]bool{
		".f.txt.sandglass-0123456789ab": true, ".f.txt.sandglass-0123456789aZ": false, "f.sandglass-0123456789ab": false,
		".sandglass-0123456789ab": false, ".x.sandglass-0123": false,
	} {
		if isTempWriteName(name) != want {
			t.Errorf("isTempWriteName(%q) = %v", name, !want)
		}
	}
}

func TestWatchEvents(t *testing.T) {
	h := startTestAgent(t)
	dir := t.TempDir()
	if _, e := h.call("fs.watch", map[string]any{"watchId": "w1", "path": dir}); e != nil {
		t.Fatal(e)
	}
	f := filepath.Join(dir, "a.txt")
	os.WriteFile(f, []byte("x"), 0o644)
	h.expectFsEvent("w1", "a.txt", "create")
	h.expectFsEvent("w1", "a.txt", "write")
	os.Chmod(f, 0o600)
	h.expectFsEvent("w1", "a.txt", "chmod")
	os.Rename(f, filepath.Join(dir, "b.txt"))
	h.expectFsEvent("w1", "a.txt", "rename")
	h.expectFsEvent("w1", "b.txt", "create")
	os.Remove(filepath.Join(dir, "b.txt"))
	h.expectFsEvent("w1", "b.txt", "remove")

	// file.write's temporary never shows; the file landing is its create and write.
	if ev := h.writeFile(1, map[string]any{"path": filepath.Join(dir, "c.txt")}, "data"); ev["event"] != "file.written" {
		t.Fatalf("file.write: %v", ev)
	}
	h.expectFsEvent("w1", "c.txt", "create")
	h.expectFsEvent("w1", "c.txt", "write")

	// Not recursive: a subdirectory's creation shows, its content does not. The marker proves the order.
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	h.expectFsEvent("w1", "sub", "create")
	os.WriteFile(filepath.Join(dir, "sub", "inner"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644)
	h.expectFsEvent("w1", "marker", "create")

	if _, e := h.call("fs.watch", map[string]any{"watchId": "w1", "path": dir}); e == nil || e.Code != "bad_request" {
		t.Fatalf("a watchId in use: %v, want bad_request", e)
	}
	if _, e := h.call("fs.watch", map[string]any{"watchId": "w2", "path": filepath.Join(dir, "nope")}); e == nil || e.Code != "not_found" {
		t.Fatalf("missing path: %v, want not_found", e)
	}
	if _, e := h.call("fs.watch", map[string]any{"watchId": "w2", "path": filepath.Join(dir, "marker")}); e == nil || e.Code != "not_a_directory" {
		t.Fatalf("a file: %v, want not_a_directory", e)
	}
}

func TestWatchRecursive(t *testing.T) {
	h := startTestAgent(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "old", "deep"), 0o755)
	if _, e := h.call("fs.watch", map[string]any{"watchId": "r", "path": dir, "recursive": true}); e != nil {
		t.Fatal(e)
	}
	os.WriteFile(filepath.Join(dir, "old", "deep", "f"), nil, 0o644)
	h.expectFsEvent("r", "old/deep/f", "create")
	// A whole new tree at once: what appeared before its watches were in place is reported as created.
	os.MkdirAll(filepath.Join(dir, "n1", "n2"), 0o755)
	os.WriteFile(filepath.Join(dir, "n1", "n2", "g"), nil, 0o644)
	h.expectFsEvent("r", "n1/n2/g", "create", "old/deep/f", "n1", "n1/n2")
	// Written and closed before its directory's watch existed, or after: either way its write is reported.
	h.expectFsEvent("r", "n1/n2/g", "write", "n1/n2/g")
	// A directory moved within the tree is followed under its new name only.
	os.Rename(filepath.Join(dir, "n1"), filepath.Join(dir, "m1"))
	h.expectFsEvent("r", "m1", "create", "old/deep/f", "n1", "n1/n2", "n1/n2/g")
	os.WriteFile(filepath.Join(dir, "m1", "n2", "h"), nil, 0o644)
	h.expectFsEvent("r", "m1/n2/h", "create", "old/deep/f", "n1", "n1/n2", "n1/n2/g", "m1", "m1/n2", "m1/n2/g")
	// Moved out of the tree: no longer followed. The marker, written later, proves nothing came from it.
	outside := t.TempDir()
	os.Rename(filepath.Join(dir, "m1"), filepath.Join(outside, "m1"))
	h.expectFsEvent("r", "m1", "rename", "m1/n2/h")
	os.WriteFile(filepath.Join(outside, "m1", "n2", "late"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644)
	h.expectFsEvent("r", "marker", "create")
}

func TestUnwatchAndHelloEndWatches(t *testing.T) {
	h := startTestAgent(t)
	dir := t.TempDir()
	for _, id := range []string{"gone", "probe"} {
		if _, e := h.call("fs.watch", map[string]any{"watchId": id, "path": dir}); e != nil {
			t.Fatal(e)
		}
	}
	if _, e := h.call("fs.unwatch", map[string]any{"watchId": "gone"}); e != nil {
		t.Fatal(e)
	}
	// Both watches share one inotify queue: once probe saw the later file, an event of gone would have come first.
	os.WriteFile(filepath.Join(dir, "after-unwatch"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "probe-1"), nil, 0o644)
	h.expectFsEvent("probe", "probe-1", "create", "after-unwatch")
	for _, f := range h.backlog {
		var e fsEventMsg
		json.Unmarshal(f.payload, &e)
		if e.WatchID == "gone" {
			t.Fatalf("event %+v after fs.unwatch", e)
		}
	}

	if _, e := h.call("hello", map[string]any{"version": 1}); e != nil {
		t.Fatal(e)
	}
	if _, e := h.call("fs.watch", map[string]any{"watchId": "fresh", "path": dir}); e != nil {
		t.Fatalf("hello freed the ids: %v", e)
	}
	h.backlog = nil
	os.WriteFile(filepath.Join(dir, "after-hello"), nil, 0o644)
	h.expectFsEvent("fresh", "after-hello", "create")
	for _, f := range h.backlog {
		var e fsEventMsg
		json.Unmarshal(f.payload, &e)
		if e.WatchID == "probe" {
			t.Fatalf("event %+v of a watch hello reset", e)
		}
	}
}

func TestWatchLimit(t *testing.T) {
	h := startTestAgent(t)
	dir := t.TempDir()
	for i := 0; i < maxWatches; i++ {
		if _, e := h.call("fs.watch", map[string]any{"watchId": "w" + string(rune('a'+i%26)) + string(rune('a'+i/26)), "path": dir}); e != nil {
			t.Fatalf("watch %d: %v", i, e)
		}
	}
	if _, e := h.call("fs.watch", map[string]any{"watchId": "one-more", "path": dir}); e == nil || e.Code != "busy" {
		t.Fatalf("watch %d: %v, want busy", maxWatches+1, e)
	}
}
