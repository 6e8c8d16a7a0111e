// File ownership: uid/gid names for metadata from the guest's /etc/passwd and /etc/group, and owned directory creation.
package main

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// idNames maps numeric ids to names from one passwd- or group-format file. A listing asks for a name per entry, so
// the file is parsed again only when its identity, size or mtime changed.
type idNames struct {
	path string

	mu    sync.Mutex
	ino   uint64
	size  int64
	mtime time.Time
	names map[uint32]string // replaced wholesale, never mutated: callers may keep it
}

var (
	userNames  = &idNames{path: "/etc/passwd"}
	groupNames = &idNames{path: "/etc/group"}
)

// current returns the id→name map as the file is now; an unreadable or absent file has no names.
func (n *idNames) current() map[uint32]string {
	st, err := os.Stat(n.path)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		n.names, n.ino = nil, 0
		return nil
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	if n.names != nil && ino == n.ino && st.Size() == n.size && st.ModTime().Equal(n.mtime) {
		return n.names
	}
	names, err := parseIDFile(n.path)
	if err != nil {
		n.names, n.ino = nil, 0
		return nil
	}
	n.names, n.ino, n.size, n.mtime = names, ino, st.Size(), st.ModTime()
	return names
}

// parseIDFile reads `name:password:id:…` lines; the first line naming an id wins, as with getpwuid(3).
func parseIDFile(path string) (map[uint32]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names := map[uint32]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.SplitN(line, ":", 4)
		if len(fields) < 3 || fields[0] == "" {
			continue
		}
		id, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		if _, seen := names[uint32(id)]; !seen {
			names[uint32(id)] = fields[0]
		}
	}
	return names, sc.Err()
}

// ownerNames is what one request needs to name the owners of its entries.
type ownerNames struct{ users, groups map[uint32]string }

func currentOwnerNames() ownerNames {
	return ownerNames{users: userNames.current(), groups: groupNames.current()}
}

// resolveOwner turns file.write/file.mkdir's `owner` (a user name or decimal uid) into the uid and primary gid to
// chown to; nil for no owner. A user the guest does not know is the caller's mistake, not something to guess.
func resolveOwner(spec string) (*userInfo, error) {
	if spec == "" {
		return nil, nil
	}
	u, err := lookupUser(spec)
	if err != nil {
		return nil, errorf("bad_request", "owner: unknown user %q", spec)
	}
	return u, nil
}

// mkdirChain creates path (and, with parents, its missing ancestors) and chowns each directory it created to own.
// It walks by directory descriptors: a directory it created is entered with O_NOFOLLOW and chowned relative to its
// parent, so a guest program that swaps it for a symlink meanwhile cannot redirect the chown elsewhere. Components
// that already existed are followed as path resolution would. Reports whether the last component was created.
func mkdirChain(path string, parents bool, own *userInfo) (bool, error) {
	clean := filepath.Clean(path)
	if clean == "/" {
		return false, nil
	}
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	fd, err := syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	defer func() { syscall.Close(fd) }()
	created := false
	for i, name := range parts {
		last := i == len(parts)-1
		at := "/" + strings.Join(parts[:i+1], "/")
		created = false
		if parents || last {
			err := syscall.Mkdirat(fd, name, 0o755)
			switch {
			case err == nil:
				created = true
			case errors.Is(err, syscall.EEXIST):
			default:
				return false, &os.PathError{Op: "mkdir", Path: at, Err: err}
			}
		}
		if created && own != nil {
			if err := syscall.Fchownat(fd, name, int(own.uid), int(own.gid), atSymlinkNofollow); err != nil {
				return false, &os.PathError{Op: "chown", Path: at, Err: err}
			}
		}
		if last {
			if !created {
				// Something already there: only a directory (or a link to one) is what the caller asked for.
				st, err := os.Stat(at)
				if err != nil {
					return false, err
				}
				if !st.IsDir() {
					return false, &os.PathError{Op: "mkdir", Path: at, Err: syscall.ENOTDIR}
				}
			}
			return created, nil
		}
		flags := syscall.O_RDONLY | syscall.O_DIRECTORY | syscall.O_CLOEXEC
		if created {
			flags |= syscall.O_NOFOLLOW
		}
		next, err := syscall.Openat(fd, name, flags, 0)
		if err != nil {
			return false, &os.PathError{Op: "open", Path: at, Err: err}
		}
		syscall.Close(fd)
		fd = next
	}
	return created, nil
}

// atSymlinkNofollow is AT_SYMLINK_NOFOLLOW, which the syscall package does not export.
const atSymlinkNofollow = 0x100
