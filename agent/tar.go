// Directories as tar streams: file.writeTar extracts one into a directory without ever leaving it, file.readTar
// packs one up; both stream (spec/agent-protocol.md, "Directories as tar streams").
package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

const (
	// maxTarEntries bounds what one upload may create, so a stream of empty headers cannot exhaust inodes unnoticed.
	maxTarEntries = 1_000_000
	// maxTarNameBytes bounds entry and link names (PATH_MAX).
	maxTarNameBytes = 4096
	// hostWindowBytes is the host's credit on a file.write or file.writeTar stream. The disk or an extraction may be
	// slower than the port (many small files, a throttled guest): with credit, the bytes waiting for them stay few
	// and the connection's reader never blocks on them, so calls (health pings) keep being answered meanwhile.
	hostWindowBytes = 2 << 20
	// tarDirCacheFds bounds the directory descriptors one extraction keeps open.
	tarDirCacheFds = 64
)

// creditQueue hands DATA payloads from the connection's reader to a consumer goroutine as an io.Reader, within a
// credit the host was granted: push never blocks, and the consumer grants bytes back as it takes them. Payloads
// are the reader's fresh allocations, so they are not copied.
type creditQueue struct {
	mu      sync.Mutex
	frames  [][]byte
	queued  int
	closed  bool
	abort   error // with closed: the stream ended badly
	wake    chan struct{}
	cur     []byte
	taken   int // bytes of cur's frame, granted back once it is consumed
	ungrant int // consumed bytes not granted back yet
	grant   func(n int)
}

func newCreditQueue(grant func(n int)) *creditQueue {
	return &creditQueue{wake: make(chan struct{}, 1), grant: grant}
}

func (q *creditQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// push queues a payload; a host that sends past its credit ends the stream with bad_request.
func (q *creditQueue) push(p []byte) {
	q.mu.Lock()
	if !q.closed {
		if q.queued+len(p) > hostWindowBytes {
			q.closed, q.abort = true, errorf("bad_request", "the host sent more than the %d bytes of credit it was granted", hostWindowBytes)
		} else {
			q.frames = append(q.frames, p)
			q.queued += len(p)
		}
	}
	q.mu.Unlock()
	q.signal()
}

func (q *creditQueue) close(abort error) {
	q.mu.Lock()
	if !q.closed {
		q.closed, q.abort = true, abort
	}
	q.mu.Unlock()
	q.signal()
}

// next returns the next queued payload whole, after granting back the one before it; io.EOF after a clean END.
func (q *creditQueue) next() ([]byte, error) {
	if q.taken > 0 {
		q.mu.Lock()
		q.queued -= q.taken
		q.mu.Unlock()
		// Batched: a grant per quarter window keeps the host sending with few WINDOW frames.
		if q.ungrant += q.taken; q.ungrant >= hostWindowBytes/4 {
			q.grant(q.ungrant)
			q.ungrant = 0
		}
		q.taken = 0
	}
	for {
		q.mu.Lock()
		if len(q.frames) > 0 {
			f := q.frames[0]
			q.frames[0] = nil
			q.frames = q.frames[1:]
			q.taken = len(f)
			q.mu.Unlock()
			return f, nil
		}
		closed, abort := q.closed, q.abort
		q.mu.Unlock()
		if closed {
			if abort != nil {
				return nil, abort
			}
			return nil, io.EOF
		}
		if q.ungrant > 0 {
			// Idle: whatever was consumed goes back now, or a host with less than a quarter window left would wait.
			q.grant(q.ungrant)
			q.ungrant = 0
		}
		<-q.wake
	}
}

func (q *creditQueue) Read(p []byte) (int, error) {
	for len(q.cur) == 0 {
		f, err := q.next()
		if err != nil {
			return 0, err
		}
		q.cur = f
	}
	n := copy(p, q.cur)
	q.cur = q.cur[n:]
	return n, nil
}

// WriteTo hands whole payloads to w (io.Copy uses it): a file.write's bytes are not copied once more in the agent.
func (q *creditQueue) WriteTo(w io.Writer) (int64, error) {
	var total int64
	if len(q.cur) > 0 {
		n, err := w.Write(q.cur)
		total += int64(n)
		q.cur = nil
		if err != nil {
			return total, err
		}
	}
	for {
		f, err := q.next()
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		n, err := w.Write(f)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
}

// tarWriteStream receives a file.writeTar: DATA is a tar stream extracted as it arrives, END finishes it.
type tarWriteStream struct {
	c     *conn
	id    uint32
	path  string
	q     *creditQueue
	owner *userInfo
	root  int // descriptor of the target directory
}

func fileWriteTar(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Path     string
		StreamID uint32 `json:"streamId"`
		Owner    string
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkPath(p.Path); err != nil {
		return nil, nil, err
	}
	own, err := resolveOwner(p.Owner)
	if err != nil {
		return nil, nil, err
	}
	if _, err := mkdirChain(p.Path, true, own); err != nil {
		return nil, nil, mapErr(err)
	}
	root, err := syscall.Open(p.Path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, mapErr(&os.PathError{Op: "open", Path: p.Path, Err: err})
	}
	ts := &tarWriteStream{c: c, id: p.StreamID, path: filepath.Clean(p.Path), owner: own, root: root}
	ts.q = newCreditQueue(func(n int) { c.sendWindow(p.StreamID, n) })
	if err := c.addStream(p.StreamID, ts); err != nil {
		syscall.Close(root)
		return nil, nil, err
	}
	return map[string]any{"window": hostWindowBytes}, func() { go ts.extract() }, nil
}

func (ts *tarWriteStream) data(p []byte) { ts.q.push(p) }
func (ts *tarWriteStream) window(uint32) {}
func (ts *tarWriteStream) stop()         { ts.q.close(errors.New("connection to the host ended")) }
func (ts *tarWriteStream) end(pl []byte) {
	ts.c.removeStream(ts.id, ts)
	if len(pl) > 0 {
		var e struct{ Error *protoError }
		msg := "host aborted the upload"
		if json.Unmarshal(pl, &e) == nil && e.Error != nil {
			msg += ": " + e.Error.Message
		}
		ts.q.close(errors.New(msg))
		return
	}
	ts.q.close(nil)
}

// extract runs until the tar stream ends, then reports once: file.written with the entry count, or
// file.write_failed as soon as something fails (the host may stop sending; later DATA is dropped).
func (ts *tarWriteStream) extract() {
	x := &extractor{root: ts.root, owner: ts.owner, dirs: map[string]int{}}
	defer x.closeAll()
	entries, sizeBytes, err := x.run(ts.q)
	if err == nil {
		// The archive ended; what follows its trailer until END is padding.
		_, err = io.Copy(io.Discard, ts.q)
	}
	if err != nil {
		ts.c.removeStream(ts.id, ts)
		ts.c.sendJSON(frameEvent, 0, map[string]any{
			"event": "file.write_failed", "streamId": ts.id, "path": ts.path, "error": mapErr(err),
		})
		return
	}
	ts.c.sendJSON(frameEvent, 0, map[string]any{
		"event": "file.written", "streamId": ts.id, "path": ts.path, "sizeBytes": sizeBytes, "entries": entries,
	})
}

// extractor writes tar entries below root. Every path is resolved one component at a time with O_NOFOLLOW from
// root, so neither a `..`, an absolute name, nor a symlink (in the archive or planted by a guest program) can make
// it write outside the target directory.
type extractor struct {
	root  int
	owner *userInfo
	dirs  map[string]int // relative directory → descriptor, bounded by tarDirCacheFds
	buf   []byte
}

func (x *extractor) closeAll() {
	for k, fd := range x.dirs {
		syscall.Close(fd)
		delete(x.dirs, k)
	}
	syscall.Close(x.root)
}

// cleanName validates an archive name and returns it relative to the target ("" for the target itself).
func cleanName(name string) (string, error) {
	if len(name) > maxTarNameBytes || strings.IndexByte(name, 0) >= 0 {
		return "", errorf("bad_request", "tar entry name is too long or holds NUL")
	}
	if strings.HasPrefix(name, "/") {
		return "", errorf("bad_request", "tar entry %q is absolute", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", errorf("bad_request", "tar entry %q leaves the target directory", name)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

func (x *extractor) run(r io.Reader) (entries int, sizeBytes int64, err error) {
	tr := tar.NewReader(r)
	x.buf = make([]byte, 256<<10)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return entries, sizeBytes, nil
		}
		if err != nil {
			var pe *protoError
			if errors.As(err, &pe) {
				return entries, sizeBytes, err
			}
			if errors.Is(err, tar.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) {
				return entries, sizeBytes, errorf("bad_request", "not a valid tar stream: %v", err)
			}
			return entries, sizeBytes, err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue // git archive's commit id: no file
		}
		if entries++; entries > maxTarEntries {
			return entries, sizeBytes, errorf("bad_request", "the archive holds more than %d entries", maxTarEntries)
		}
		n, err := x.entry(tr, hdr)
		sizeBytes += n
		if err != nil {
			return entries, sizeBytes, err
		}
	}
}

func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header) (int64, error) {
	if len(x.dirs) >= tarDirCacheFds {
		// Between entries only: descriptors parentOf handed out stay valid for the whole entry.
		for k, fd := range x.dirs {
			syscall.Close(fd)
			delete(x.dirs, k)
		}
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return 0, err
	}
	if name == "" {
		return 0, nil // "./": the target itself, which exists
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return 0, errorf("bad_request", "tar entry %q is sparse: its size would not be bounded by the stream", hdr.Name)
		}
	}
	parent, base, err := x.parentOf(name, true)
	if err != nil {
		return 0, err
	}
	mode := uint32(hdr.Mode) & 0o7777
	switch hdr.Typeflag {
	case tar.TypeDir:
		created := true
		if err := syscall.Mkdirat(parent, base, 0o700); err != nil {
			if !errors.Is(err, syscall.EEXIST) {
				return 0, &os.PathError{Op: "mkdir", Path: name, Err: err}
			}
			created = false
			var st syscall.Stat_t
			if err := fstatat(parent, base, &st, atSymlinkNofollow); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				return 0, errorf("exists", "%s exists and is not a directory", name)
			}
		}
		if created {
			if err := x.chown(parent, base, name); err != nil {
				return 0, err
			}
			// Directories keep the archive's mode: through the parent, by name, on what cannot be a link (just made).
			if err := syscall.Fchmodat(parent, base, mode, 0); err != nil {
				return 0, &os.PathError{Op: "chmod", Path: name, Err: err}
			}
		}
		return 0, nil
	case tar.TypeReg, tar.TypeRegA:
		return x.file(tr, hdr, parent, base, name, mode)
	case tar.TypeSymlink:
		if len(hdr.Linkname) > maxTarNameBytes || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return 0, errorf("bad_request", "symlink target of %q is too long or holds NUL", hdr.Name)
		}
		if err := x.replaceable(parent, base, name); err != nil {
			return 0, err
		}
		if err := symlinkat(hdr.Linkname, parent, base); err != nil {
			return 0, &os.PathError{Op: "symlink", Path: name, Err: err}
		}
		return 0, x.chown(parent, base, name)
	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil || target == "" {
			return 0, errorf("bad_request", "hard link %q must name a file inside the archive", hdr.Name)
		}
		srcParent, srcBase, err := x.parentOf(target, false)
		if err != nil {
			return 0, err
		}
		if err := x.replaceable(parent, base, name); err != nil {
			return 0, err
		}
		// Flags 0: a link to a symlink links the symlink itself, never what it points at.
		if err := linkat(srcParent, srcBase, parent, base); err != nil {
			return 0, &os.PathError{Op: "link", Path: name, Err: err}
		}
		return 0, nil
	default:
		return 0, errorf("bad_request", "tar entry %q has type %q: only files, directories, symlinks and hard links are extracted", hdr.Name, string(hdr.Typeflag))
	}
}

// file writes one regular file directly under its name (no temporary file: an upload of many small files must not
// double its syscalls); an existing entry is unlinked first, as tar does.
func (x *extractor) file(tr *tar.Reader, hdr *tar.Header, parent int, base, name string, mode uint32) (int64, error) {
	// Created with its final permission bits when the umask keeps them (the common case): no chmod. Under emulation
	// every syscall per file shows in a 10,000-file upload, so a file costs openat, write, utimensat and close.
	perm := mode & 0o777
	needChmod := x.owner != nil || mode&0o7000 != 0 || perm&processUmask() != 0
	flags := syscall.O_WRONLY | syscall.O_CREAT | syscall.O_EXCL | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	fd, err := syscall.Openat(parent, base, flags, perm)
	if errors.Is(err, syscall.EEXIST) {
		// Whatever stands there (a file, a hard link to one elsewhere, a symlink) is replaced, never written through.
		if err := x.replaceable(parent, base, name); err != nil {
			return 0, err
		}
		fd, err = syscall.Openat(parent, base, flags, perm)
	}
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: name, Err: err}
	}
	closed := false
	defer func() {
		if !closed {
			syscall.Close(fd)
		}
	}()
	n, err := io.CopyBuffer(fdWriter(fd), tr, x.buf)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return n, errorf("bad_request", "the tar stream ended inside %q", hdr.Name)
		}
		return n, &os.PathError{Op: "write", Path: name, Err: err}
	}
	if x.owner != nil {
		// Before the chmod: a chown clears setuid/setgid.
		if err := syscall.Fchown(fd, int(x.owner.uid), int(x.owner.gid)); err != nil {
			return n, &os.PathError{Op: "chown", Path: name, Err: err}
		}
	}
	if needChmod {
		if err := syscall.Fchmod(fd, mode); err != nil {
			return n, &os.PathError{Op: "chmod", Path: name, Err: err}
		}
	}
	if err := futimens(fd, hdr.ModTime.UnixNano()); err != nil {
		return n, &os.PathError{Op: "utimes", Path: name, Err: err}
	}
	closed = true
	if err := syscall.Close(fd); err != nil {
		return n, &os.PathError{Op: "close", Path: name, Err: err}
	}
	return n, nil
}

// fdWriter writes to a raw descriptor (no os.File: its NewFile costs an fcntl per file).
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	total := 0
	for total < len(p) {
		n, err := syscall.Write(int(w), p[total:])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// futimens sets a descriptor's access and modification times (utimensat with no path; Go's Futimes goes through
// /proc/self/fd, a path walk per file).
func futimens(fd int, unixNano int64) error {
	ts := [2]syscall.Timespec{syscall.NsecToTimespec(unixNano), syscall.NsecToTimespec(unixNano)}
	if _, _, e := syscall.Syscall6(syscall.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// processUmask is the agent's umask, read on first use (PID 1 mounts /proc only after it starts): bits it would
// clear from a new file's mode mean a chmod after all.
var (
	umaskOnce sync.Once
	umask     uint32
)

func processUmask() uint32 {
	umaskOnce.Do(func() { umask = readUmask() })
	return umask
}

func readUmask() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777 // unknown: always chmod
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Umask:") {
			var m uint32
			if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "Umask:")), "%o", &m); err == nil {
				return m
			}
		}
	}
	return 0o777
}

// replaceable removes what stands at base unless it is a directory (an archive replaces files and links, as tar does).
func (x *extractor) replaceable(parent int, base, name string) error {
	var st syscall.Stat_t
	if err := fstatat(parent, base, &st, atSymlinkNofollow); err != nil {
		return nil
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return errorf("is_a_directory", "%s is a directory", name)
	}
	if err := syscall.Unlinkat(parent, base); err != nil {
		return &os.PathError{Op: "unlink", Path: name, Err: err}
	}
	return nil
}

func (x *extractor) chown(parent int, base, name string) error {
	if x.owner == nil {
		return nil
	}
	if err := syscall.Fchownat(parent, base, int(x.owner.uid), int(x.owner.gid), atSymlinkNofollow); err != nil {
		return &os.PathError{Op: "chown", Path: name, Err: err}
	}
	return nil
}

// parentOf returns a descriptor of rel's parent directory (owned by the cache) and rel's last component. Missing
// directories are created when create is set (tar streams may omit them); every component is entered with
// O_NOFOLLOW, so a symlink on the way fails the entry instead of redirecting it.
func (x *extractor) parentOf(rel string, create bool) (int, string, error) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		return x.root, base, nil
	}
	if fd, ok := x.dirs[dir]; ok {
		return fd, base, nil
	}
	fd := x.root
	owned := false
	parts := strings.Split(dir, "/")
	for i, part := range parts {
		at := strings.Join(parts[:i+1], "/")
		if cached, ok := x.dirs[at]; ok {
			if owned {
				syscall.Close(fd)
			}
			fd, owned = cached, false
			continue
		}
		next, err := syscall.Openat(fd, part, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.ENOENT) && create {
			if err := syscall.Mkdirat(fd, part, 0o755); err != nil && !errors.Is(err, syscall.EEXIST) {
				err = &os.PathError{Op: "mkdir", Path: at, Err: err}
				if owned {
					syscall.Close(fd)
				}
				return -1, "", err
			}
			if err := x.chown(fd, part, at); err != nil {
				if owned {
					syscall.Close(fd)
				}
				return -1, "", err
			}
			next, err = syscall.Openat(fd, part, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		}
		if owned {
			syscall.Close(fd)
		}
		if err != nil {
			if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
				return -1, "", errorf("bad_request", "%s in the target directory is not a directory (a symlink is never followed)", at)
			}
			return -1, "", &os.PathError{Op: "open", Path: at, Err: err}
		}
		fd, owned = next, true
	}
	if owned {
		x.dirs[dir] = fd
	}
	return fd, base, nil
}

func symlinkat(target string, dirfd int, name string) error {
	t, err := syscall.BytePtrFromString(target)
	if err != nil {
		return err
	}
	n, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	if _, _, e := syscall.Syscall(syscall.SYS_SYMLINKAT, uintptr(unsafe.Pointer(t)), uintptr(dirfd), uintptr(unsafe.Pointer(n))); e != 0 {
		return e
	}
	return nil
}

func fstatat(dirfd int, name string, st *syscall.Stat_t, flags int) error {
	n, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	if _, _, e := syscall.Syscall6(syscall.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0); e != 0 {
		return e
	}
	return nil
}

func linkat(oldDir int, oldName string, newDir int, newName string) error {
	o, err := syscall.BytePtrFromString(oldName)
	if err != nil {
		return err
	}
	n, err := syscall.BytePtrFromString(newName)
	if err != nil {
		return err
	}
	if _, _, e := syscall.Syscall6(syscall.SYS_LINKAT, uintptr(oldDir), uintptr(unsafe.Pointer(o)), uintptr(newDir), uintptr(unsafe.Pointer(n)), 0, 0); e != 0 {
		return e
	}
	return nil
}

// fileReadTar packs a directory as a tar stream on streamId, with credit like file.read. Symlinks are stored as
// symlinks (never followed), files linked more than once as hard links; sockets, FIFOs and devices are left out.
func fileReadTar(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Path     string
		StreamID uint32 `json:"streamId"`
		Window   int64
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
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
	s := newOutStream(p.Window)
	if err := c.addStream(p.StreamID, s); err != nil {
		return nil, nil, err
	}
	return nil, func() { go streamTar(c, p.StreamID, s, filepath.Clean(p.Path)) }, nil
}

func streamTar(c *conn, id uint32, s *outStream, root string) {
	fw := &frameWriter{c: c, id: id, s: s, buf: make([]byte, 0, maxDataBytes)}
	err := packDir(tar.NewWriter(fw), root)
	if err == nil {
		err = fw.flush()
	}
	if errors.Is(err, errStreamStopped) {
		c.removeStream(id, s)
		return
	}
	if c.removeStream(id, s) {
		c.endStream(id, err)
	}
}

func packDir(tw *tar.Writer, root string) error {
	names := currentOwnerNames()
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		sys := info.Sys().(*syscall.Stat_t)
		hdr := &tar.Header{
			Name: filepath.ToSlash(rel), Mode: int64(uint32(info.Mode().Perm()) | modeExtraBits(info.Mode())),
			Uid: int(sys.Uid), Gid: int(sys.Gid), Uname: names.users[sys.Uid], Gname: names.groups[sys.Gid],
			ModTime: info.ModTime(),
		}
		switch {
		case info.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			return tw.WriteHeader(hdr)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case info.Mode().IsRegular():
			if sys.Nlink > 1 {
				key := [2]uint64{sys.Dev, sys.Ino}
				if first, seen := links[key]; seen {
					hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
					return tw.WriteHeader(hdr)
				}
				links[key] = hdr.Name
			}
			return packFile(tw, hdr, p, info.Size())
		default:
			return nil
		}
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func packFile(tw *tar.Writer, hdr *tar.Header, p string, size int64) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr.Typeflag, hdr.Size = tar.TypeReg, size
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, size))
	if err != nil {
		return err
	}
	if n < size {
		return errorf("io", "%s shrank while it was read", p)
	}
	return nil
}

var errStreamStopped = errors.New("stream stopped")

// frameWriter turns a byte stream into DATA frames of up to maxDataBytes, each sent within the stream's credit.
type frameWriter struct {
	c   *conn
	id  uint32
	s   *outStream
	buf []byte
}

func (w *frameWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		n := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+n]
		p = p[n:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return total, nil
}

func (w *frameWriter) flush() error {
	for len(w.buf) > 0 {
		n := w.s.credit.acquire(1, len(w.buf), w.s.stopCh)
		if n == 0 {
			return errStreamStopped
		}
		if !w.c.send(encodeFrame(frameData, w.id, w.buf[:n])) {
			return errStreamStopped
		}
		w.buf = w.buf[:copy(w.buf, w.buf[n:])]
	}
	return nil
}
