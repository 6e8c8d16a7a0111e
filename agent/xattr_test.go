// Tests of files' `user.` extended attributes: what a write sets is what a stat reads, and names are checked first.
package main

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestXattrsRoundTripThroughDescriptor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]string{"origin": "upload", "empty": "", "x.y": "a b"}
	if err := setXattrs(f, want); err != nil {
		if errors.Is(err, syscall.ENOTSUP) {
			t.Skip("this filesystem keeps no user. attributes")
		}
		t.Fatal(err)
	}
	if err := syscall.Setxattr(path, "trusted.hidden", []byte("x"), 0); err == nil {
		defer syscall.Removexattr(path, "trusted.hidden")
	}
	got := userXattrs(path)
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: got %q, want %q", k, got[k], v)
		}
	}
	st, _ := os.Lstat(path)
	if e := statEntry(path, st, ownerNames{}); e["xattrs"] == nil {
		t.Fatal("stat has no xattrs")
	}
}

func TestXattrsNoneIsNil(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if x := userXattrs(path); x != nil {
		t.Fatalf("got %v", x)
	}
}

func TestCheckXattrsRefusesBadNames(t *testing.T) {
	long := make([]byte, xattrNameMax)
	for i := range long {
		long[i] = 'a'
	}
	for _, x := range []map[string]string{{"": "v"}, {"a\x00b": "v"}, {string(long): "v"}, {"k": string(make([]byte, xattrValueMax+1))}} {
		if err := checkXattrs(x); err == nil {
			t.Fatalf("%q accepted", x)
		}
	}
	if err := checkXattrs(map[string]string{"ok": "v"}); err != nil {
		t.Fatal(err)
	}
}
