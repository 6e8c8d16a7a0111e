// Files' metadata as `user.` extended attributes: set through a write's descriptor, read beside every stat.
package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"unsafe"
)

const (
	// The only namespace a write may set and a stat reports: trusted., security. and system. are the kernel's and
	// root's, and are never metadata a caller gave.
	xattrPrefix = "user."
	// XATTR_NAME_MAX and a bound on what one file may carry, so one stat answer stays small.
	xattrNameMax   = 255
	xattrValueMax  = 4096
	xattrsPerFile  = 64
	xattrListBytes = 64 * 1024
)

// checkXattrs refuses, before anything is written, names the kernel would refuse or truncate.
func checkXattrs(x map[string]string) error {
	if len(x) > xattrsPerFile {
		return errorf("bad_request", "xattrs: at most %d per file", xattrsPerFile)
	}
	for k, v := range x {
		if k == "" || len(xattrPrefix)+len(k) > xattrNameMax || strings.IndexByte(k, 0) >= 0 {
			return errorf("bad_request", "xattrs: name %q must be 1 to %d bytes without NUL", k, xattrNameMax-len(xattrPrefix))
		}
		if len(v) > xattrValueMax {
			return errorf("bad_request", "xattrs: value of %q is over %d bytes", k, xattrValueMax)
		}
	}
	return nil
}

// setXattrs writes through the descriptor, so no path a guest program could swap is followed.
func setXattrs(f *os.File, x map[string]string) error {
	for k, v := range x {
		name, err := syscall.BytePtrFromString(xattrPrefix + k)
		if err != nil {
			return err
		}
		val := []byte(v)
		var p unsafe.Pointer
		if len(val) > 0 {
			p = unsafe.Pointer(&val[0])
		}
		if _, _, errno := syscall.Syscall6(syscall.SYS_FSETXATTR, f.Fd(), uintptr(unsafe.Pointer(name)), uintptr(p), uintptr(len(val)), 0, 0); errno != 0 {
			return &os.PathError{Op: "fsetxattr", Path: f.Name(), Err: errno}
		}
	}
	return nil
}

func lxattrCall(trap uintptr, path string, name string, buf []byte) (int, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return 0, err
	}
	var b unsafe.Pointer
	if len(buf) > 0 {
		b = unsafe.Pointer(&buf[0])
	}
	var r uintptr
	var errno syscall.Errno
	if trap == syscall.SYS_LLISTXATTR {
		r, _, errno = syscall.Syscall(trap, uintptr(unsafe.Pointer(p)), uintptr(b), uintptr(len(buf)))
	} else {
		n, err := syscall.BytePtrFromString(name)
		if err != nil {
			return 0, err
		}
		r, _, errno = syscall.Syscall6(trap, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(n)), uintptr(b), uintptr(len(buf)), 0, 0)
	}
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// userXattrs reads a path's `user.` attributes without following a symlink (as Lstat); nil when it has none or the
// filesystem keeps none. A value too large to read whole is left out rather than cut.
func userXattrs(path string) map[string]string {
	// Asked for the size first: most files have none, and a listing stats every entry.
	size, err := lxattrCall(syscall.SYS_LLISTXATTR, path, "", nil)
	if err != nil || size == 0 || size > xattrListBytes {
		return nil
	}
	list := make([]byte, size)
	n, err := lxattrCall(syscall.SYS_LLISTXATTR, path, "", list)
	if err != nil || n == 0 {
		return nil
	}
	var out map[string]string
	val := make([]byte, xattrValueMax)
	for _, name := range bytes.Split(list[:n], []byte{0}) {
		key := string(name)
		if !strings.HasPrefix(key, xattrPrefix) || len(out) >= xattrsPerFile {
			continue
		}
		m, err := lxattrCall(syscall.SYS_LGETXATTR, path, key, val)
		if err != nil {
			if errors.Is(err, syscall.ERANGE) || errors.Is(err, syscall.ENODATA) {
				continue
			}
			return out
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.TrimPrefix(key, xattrPrefix)] = string(val[:m])
	}
	return out
}
