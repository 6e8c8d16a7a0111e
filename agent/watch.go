// fs.watch / fs.unwatch: directory change events from inotify, as EVENT fs.event on the connection that asked.
package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"
)

const (
	// maxWatches bounds the fs.watch subscriptions of the agent; more are refused with busy.
	maxWatches = 256
	// maxWatchDirs bounds the directories one recursive watch follows: each costs kernel memory (an inotify watch).
	maxWatchDirs = 4096
	// watchMask: what a watched directory reports. IN_CLOSE_WRITE rather than IN_MODIFY gives one write per writer
	// that closes the file instead of one per write(2), at the price of no event while a writer keeps it open.
	watchMask = syscall.IN_CREATE | syscall.IN_MOVED_TO | syscall.IN_CLOSE_WRITE | syscall.IN_DELETE |
		syscall.IN_MOVED_FROM | syscall.IN_ATTRIB | syscall.IN_ONLYDIR | syscall.IN_DONT_FOLLOW
)

// fsWatch is one fs.watch subscription: a directory, and with recursive its subdirectories, reported to one connection.
type fsWatch struct {
	id        string
	c         *conn
	root      string
	recursive bool
	dirs      map[int32]string // inotify descriptor → directory relative to root ("" for root)
	// lost: a subdirectory could not be followed (limit reached); reported once as an overflow.
	lost bool
}

// watchedDir is one inotify descriptor; several subscriptions may watch the same directory.
type watchedDir struct {
	subs map[*fsWatch]string // subscription → this directory relative to its root
}

// watcher is the agent's single inotify instance (the kernel allows few per user), created on first use.
type watcher struct {
	fd      int
	file    *os.File
	watches map[string]*fsWatch
	dirs    map[int32]*watchedDir
	// tmpMoves: cookies of renames whose source was a file.write temporary; the matching IN_MOVED_TO is the
	// write landing, reported as create and write of the target.
	tmpMoves map[uint32]bool
}

// fsEvent is an event ready to send; sent with the agent's watchMu held so fs.unwatch's REPLY follows the last one.
type fsEvent struct {
	w        *fsWatch
	name, op string
}

func fsWatchMethod(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		WatchID   string `json:"watchId"`
		Path      string
		Recursive bool
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if p.WatchID == "" || len(p.WatchID) > 128 {
		return nil, nil, errorf("bad_request", "watchId must be 1 to 128 characters")
	}
	if err := checkPath(p.Path); err != nil {
		return nil, nil, err
	}
	st, err := os.Stat(p.Path)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	if !st.IsDir() {
		return nil, nil, errorf("not_a_directory", "%s is not a directory", p.Path)
	}
	a := c.a
	a.watchMu.Lock()
	defer a.watchMu.Unlock()
	if !c.live() {
		return nil, nil, errorf("bad_request", "the connection was reset")
	}
	wr, err := a.watcherLocked()
	if err != nil {
		return nil, nil, mapErr(err)
	}
	if _, dup := wr.watches[p.WatchID]; dup {
		return nil, nil, errorf("bad_request", "watchId %q is already in use", p.WatchID)
	}
	if len(wr.watches) >= maxWatches {
		return nil, nil, errorf("busy", "%d directory watches are open; unwatch one first", maxWatches)
	}
	w := &fsWatch{id: p.WatchID, c: c, root: filepath.Clean(p.Path), recursive: p.Recursive, dirs: map[int32]string{}}
	if err := wr.addDir(w, "", nil); err != nil {
		wr.drop(w)
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, errTooManyDirs) {
			return nil, nil, errorf("busy", "too many directories under %s to watch", p.Path)
		}
		return nil, nil, mapErr(err)
	}
	wr.watches[w.id] = w
	return nil, nil, nil
}

func fsUnwatchMethod(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		WatchID string `json:"watchId"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	a := c.a
	a.watchMu.Lock()
	defer a.watchMu.Unlock()
	if wr := a.watcher; wr != nil {
		if w := wr.watches[p.WatchID]; w != nil && w.c == c {
			wr.drop(w)
		}
	}
	return nil, nil, nil
}

// unwatchConn ends every watch of c: its connection ended or hello reset it.
func (a *agent) unwatchConn(c *conn) {
	a.watchMu.Lock()
	defer a.watchMu.Unlock()
	if wr := a.watcher; wr != nil {
		for _, w := range wr.watches {
			if w.c == c {
				wr.drop(w)
			}
		}
	}
}

func (a *agent) watcherLocked() (*watcher, error) {
	if a.watcher != nil {
		return a.watcher, nil
	}
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	// Non-blocking, so os.File reads through the runtime poller instead of holding a thread.
	wr := &watcher{fd: fd, file: os.NewFile(uintptr(fd), "inotify"), watches: map[string]*fsWatch{},
		dirs: map[int32]*watchedDir{}, tmpMoves: map[uint32]bool{}}
	a.watcher = wr
	go a.readEvents(wr)
	return wr, nil
}

var errTooManyDirs = errors.New("too many directories")

// addDir watches root/rel for w and, when w is recursive, every directory below it. With found set, entries already
// in the new directories are reported as created, and regular files also as written: they may have appeared, and been
// written and closed, before the watch was in place, so their IN_CLOSE_WRITE was never seen. A file still being
// written reports its write again when it is closed; a repeated write is harmless, a missing one is not.
func (wr *watcher) addDir(w *fsWatch, rel string, found *[]fsEvent) error {
	if len(w.dirs) >= maxWatchDirs {
		return errTooManyDirs
	}
	full := filepath.Join(w.root, rel)
	mask := uint32(watchMask)
	if rel == "" {
		mask &^= syscall.IN_DONT_FOLLOW // the watched path itself may be a link to a directory, like for file.list
	}
	wd, err := syscall.InotifyAddWatch(wr.fd, full, mask)
	if err != nil {
		return &os.PathError{Op: "inotify_add_watch", Path: full, Err: err}
	}
	d := wr.dirs[int32(wd)]
	if d == nil {
		d = &watchedDir{subs: map[*fsWatch]string{}}
		wr.dirs[int32(wd)] = d
	}
	d.subs[w] = rel
	w.dirs[int32(wd)] = rel
	if !w.recursive && found == nil {
		return nil
	}
	des, err := os.ReadDir(full)
	if err != nil {
		return nil // removed meanwhile: its IN_IGNORED cleans up
	}
	for _, de := range des {
		child := filepath.Join(rel, de.Name())
		if found != nil {
			*found = append(*found, fsEvent{w: w, name: child, op: "create"})
			if de.Type().IsRegular() {
				*found = append(*found, fsEvent{w: w, name: child, op: "write"})
			}
		}
		if w.recursive && de.IsDir() {
			if err := wr.addDir(w, child, found); err != nil {
				var pe *os.PathError
				if errors.As(err, &pe) && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP)) {
					continue // gone or replaced while we walked
				}
				return err
			}
		}
	}
	return nil
}

// drop ends w: its descriptors are released when no other subscription shares them.
func (wr *watcher) drop(w *fsWatch) {
	if wr.watches[w.id] == w {
		delete(wr.watches, w.id)
	}
	for wd := range w.dirs {
		wr.forget(w, wd)
	}
}

// forget stops following one directory for w.
func (wr *watcher) forget(w *fsWatch, wd int32) {
	delete(w.dirs, wd)
	d := wr.dirs[wd]
	if d == nil {
		return
	}
	delete(d.subs, w)
	if len(d.subs) == 0 {
		delete(wr.dirs, wd)
		syscall.InotifyRmWatch(wr.fd, uint32(wd))
	}
}

func (a *agent) readEvents(wr *watcher) {
	buf := make([]byte, 64<<10)
	for {
		n, err := wr.file.Read(buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return
			}
			continue // EINTR and the like
		}
		a.watchMu.Lock()
		events := wr.handle(buf[:n])
		for _, ev := range events {
			m := map[string]any{"event": "fs.event", "watchId": ev.w.id, "op": ev.op}
			if ev.op != "overflow" {
				m["name"] = ev.name
			}
			// A send blocks while the transport is full; the kernel queues meanwhile and says so with an overflow.
			ev.w.c.sendJSON(frameEvent, 0, m)
		}
		a.watchMu.Unlock()
	}
}

// handle decodes a read of inotify events into the events to send, and follows new and moved subdirectories.
func (wr *watcher) handle(buf []byte) []fsEvent {
	var out []fsEvent
	for off := 0; off+syscall.SizeofInotifyEvent <= len(buf); {
		raw := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(raw.Len)]
		off += syscall.SizeofInotifyEvent + int(raw.Len)
		name := strings.TrimRight(string(nameBytes), "\x00")
		out = wr.handleOne(raw.Wd, raw.Mask, raw.Cookie, name, out)
	}
	return out
}

func (wr *watcher) handleOne(wd int32, mask, cookie uint32, name string, out []fsEvent) []fsEvent {
	if mask&syscall.IN_Q_OVERFLOW != 0 {
		for _, w := range wr.watches {
			out = append(out, fsEvent{w: w, op: "overflow"})
		}
		return out
	}
	d := wr.dirs[wd]
	if d == nil {
		return out // a descriptor we already let go of
	}
	if mask&syscall.IN_IGNORED != 0 {
		// The directory is gone (deleted, or its file system unmounted): the kernel dropped the descriptor.
		for w := range d.subs {
			delete(w.dirs, wd)
		}
		delete(wr.dirs, wd)
		return out
	}
	isDir := mask&syscall.IN_ISDIR != 0
	if isTempWriteName(name) {
		// file.write's own temporary: not a file anyone asked for. Its rename into place becomes create+write.
		if mask&syscall.IN_MOVED_FROM != 0 {
			if len(wr.tmpMoves) > 64 {
				wr.tmpMoves = map[uint32]bool{}
			}
			wr.tmpMoves[cookie] = true
		}
		return out
	}
	op := opOf(mask)
	if op == "" {
		return out
	}
	landed := mask&syscall.IN_MOVED_TO != 0 && wr.tmpMoves[cookie]
	if landed {
		delete(wr.tmpMoves, cookie)
	}
	for w, rel := range d.subs {
		child := filepath.Join(rel, name)
		out = append(out, fsEvent{w: w, name: child, op: op})
		if landed {
			out = append(out, fsEvent{w: w, name: child, op: "write"})
		}
		if !w.recursive || !isDir {
			continue
		}
		switch {
		case mask&syscall.IN_MOVED_FROM != 0:
			// Its subtree now has other names (or left the watch): stop following it under the old ones.
			for cwd, crel := range w.dirs {
				if crel == child || strings.HasPrefix(crel, child+"/") {
					wr.forget(w, cwd)
				}
			}
		case mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0:
			if err := wr.addDir(w, child, &out); err != nil && !w.lost {
				var pe *os.PathError
				if !errors.As(err, &pe) || !(errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR)) {
					// Out of watches: events below it are lost, which the host learns like a queue overflow.
					w.lost = true
					out = append(out, fsEvent{w: w, op: "overflow"})
				}
			}
		}
	}
	return out
}

// opOf maps an inotify mask onto the protocol's op; "" for a mask the protocol does not report.
func opOf(mask uint32) string {
	switch {
	case mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0:
		return "create"
	case mask&(syscall.IN_CLOSE_WRITE|syscall.IN_MODIFY) != 0:
		return "write"
	case mask&syscall.IN_DELETE != 0:
		return "remove"
	case mask&syscall.IN_MOVED_FROM != 0:
		return "rename"
	case mask&syscall.IN_ATTRIB != 0:
		return "chmod"
	}
	return ""
}

// isTempWriteName tells file.write's temporaries (".<name>.sandglass-<12 hex>", see fileWrite) from other files.
func isTempWriteName(name string) bool {
	i := strings.LastIndex(name, ".sandglass-")
	if i < 1 || name[0] != '.' || len(name)-i != len(".sandglass-")+12 {
		return false
	}
	for _, r := range name[i+len(".sandglass-"):] {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}
