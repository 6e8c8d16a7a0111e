// file.* methods: metadata, directory listing, streamed reads with credit, atomic streamed writes.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// mapErr turns an OS error into a protocol error with one of the spec's codes.
func mapErr(err error) *protoError {
	var pe *protoError
	if errors.As(err, &pe) {
		return pe
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOENT:
			return errorf("not_found", "%v", err)
		case syscall.EEXIST:
			return errorf("exists", "%v", err)
		case syscall.ENOTDIR:
			return errorf("not_a_directory", "%v", err)
		case syscall.EISDIR:
			return errorf("is_a_directory", "%v", err)
		case syscall.EACCES, syscall.EPERM, syscall.EROFS:
			return errorf("permission_denied", "%v", err)
		case syscall.ENOTEMPTY:
			return errorf("bad_request", "%v", err)
		}
	}
	return errorf("io", "%v", err)
}

func checkPath(p string) error {
	if !filepath.IsAbs(p) {
		return errorf("bad_request", "path %q must be absolute", p)
	}
	return nil
}

func statEntry(path string, st fs.FileInfo, names ownerNames) map[string]any {
	e := map[string]any{
		"name": st.Name(), "path": path, "sizeBytes": st.Size(),
		"mode": uint32(st.Mode().Perm()) | modeExtraBits(st.Mode()), "mtimeMs": st.ModTime().UnixMilli(),
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		e["uid"], e["gid"] = sys.Uid, sys.Gid
		e["owner"], e["group"] = names.users[sys.Uid], names.groups[sys.Gid]
	}
	switch {
	case st.Mode().IsRegular():
		e["type"] = "file"
	case st.IsDir():
		e["type"] = "dir"
	case st.Mode()&fs.ModeSymlink != 0:
		e["type"] = "symlink"
		if target, err := os.Readlink(path); err == nil {
			e["symlinkTarget"] = target
		}
	default:
		e["type"] = "other"
	}
	if x := userXattrs(path); x != nil {
		e["xattrs"] = x
	}
	if path == "/" {
		e["name"] = "/"
	}
	return e
}

// modeExtraBits keeps setuid/setgid/sticky in the numeric mode like stat(2) does.
func modeExtraBits(m fs.FileMode) uint32 {
	var b uint32
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// fileModeOf turns a numeric mode (the protocol's, as in chmod(2)) into Go's, whose setuid, setgid and sticky
// flags are not the numeric bits: os.FileMode(0o4755) would silently drop the setuid bit.
func fileModeOf(n uint32) os.FileMode {
	m := os.FileMode(n & 0o777)
	if n&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

func fileStat(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct{ Path string }
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkPath(p.Path); err != nil {
		return nil, nil, err
	}
	st, err := os.Lstat(p.Path)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	return statEntry(filepath.Clean(p.Path), st, currentOwnerNames()), nil, nil
}

func fileList(c *conn, raw json.RawMessage) (any, func(), error) {
	p := struct {
		Path  string
		Depth int
	}{Depth: 1}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkPath(p.Path); err != nil {
		return nil, nil, err
	}
	if p.Depth < 1 {
		return nil, nil, errorf("bad_request", "depth must be ≥1")
	}
	st, err := os.Stat(p.Path)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	if !st.IsDir() {
		return nil, nil, errorf("not_a_directory", "%s is not a directory", p.Path)
	}
	entries := []map[string]any{}
	names := currentOwnerNames()
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		des, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, de := range des {
			full := filepath.Join(dir, de.Name())
			info, err := de.Info()
			if err != nil {
				continue // removed while we listed
			}
			entries = append(entries, statEntry(full, info, names))
			if de.IsDir() && depth > 1 {
				if err := walk(full, depth-1); err != nil && !errors.Is(err, fs.ErrPermission) {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(filepath.Clean(p.Path), p.Depth); err != nil {
		return nil, nil, mapErr(err)
	}
	return map[string]any{"entries": entries}, nil, nil
}

func fileMkdir(c *conn, raw json.RawMessage) (any, func(), error) {
	p := struct {
		Path    string
		Parents bool
		Owner   string
	}{Parents: true}
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
	if st, err := os.Stat(p.Path); err == nil {
		if st.IsDir() {
			return map[string]any{"created": false}, nil, nil
		}
		return nil, nil, errorf("exists", "%s exists and is not a directory", p.Path)
	}
	created, err := mkdirChain(p.Path, p.Parents, own)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	return map[string]any{"created": created}, nil, nil
}

func fileRemove(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Path      string
		Recursive bool
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkPath(p.Path); err != nil {
		return nil, nil, err
	}
	if filepath.Clean(p.Path) == "/" {
		return nil, nil, errorf("bad_request", "refusing to remove /")
	}
	if _, err := os.Lstat(p.Path); err != nil {
		return nil, nil, mapErr(err)
	}
	var err error
	if p.Recursive {
		err = os.RemoveAll(p.Path)
	} else {
		err = os.Remove(p.Path)
	}
	if err != nil {
		return nil, nil, mapErr(err)
	}
	return nil, nil, nil
}

func fileRename(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct{ From, To string }
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkPath(p.From); err != nil {
		return nil, nil, err
	}
	if err := checkPath(p.To); err != nil {
		return nil, nil, err
	}
	if err := os.Rename(p.From, p.To); err != nil {
		return nil, nil, mapErr(err)
	}
	return nil, nil, nil
}

// fileRead opens the file before replying (so errors become the reply), then streams on its
// own goroutine. It is not inline: opening a FIFO may block until a writer appears.
func fileRead(c *conn, raw json.RawMessage) (any, func(), error) {
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
	f, err := os.Open(p.Path)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, mapErr(err)
	}
	if st.IsDir() {
		f.Close()
		return nil, nil, errorf("is_a_directory", "%s is a directory", p.Path)
	}
	s := newOutStream(p.Window)
	if err := c.addStream(p.StreamID, s); err != nil {
		f.Close()
		return nil, nil, err
	}
	return map[string]any{"sizeBytes": st.Size()}, func() { go streamFile(c, p.StreamID, s, f) }, nil
}

func streamFile(c *conn, id uint32, s *outStream, f *os.File) {
	defer f.Close()
	defer c.removeStream(id, s)
	if c.port != nil && streamFileSpliced(c, id, s, f) {
		return
	}
	for {
		n := s.credit.acquire(1, maxDataBytes, s.stopCh)
		if n == 0 {
			return // the host ended the stream or the connection went away
		}
		frame := newFrame(frameData, id, n)
		got, err := io.ReadFull(f, frame[frameHeaderBytes:])
		if got > 0 {
			frame = frame[:frameHeaderBytes+got]
			putHeader(frame, frameData, id)
			if !c.send(frame) {
				return
			}
		}
		s.credit.giveBack(n - got)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			if c.removeStream(id, s) {
				c.endStream(id, nil)
			}
			return
		}
		if err != nil {
			if c.removeStream(id, s) {
				c.endStream(id, err)
			}
			return
		}
	}
}

// writeStream receives a file.write: DATA goes to a temporary file beside the target, END
// renames it into place so readers never see a half-written file. The bytes go through a credit queue to a goroutine
// of their own, so a slow disk never blocks the connection's reader (calls keep being answered during a write).
type writeStream struct {
	c         *conn
	id        uint32
	path      string
	tmp       string
	f         *os.File
	mode      os.FileMode
	owner     *userInfo // chowned to before the rename, so the file appears in place already owned
	append    bool
	xattrs    map[string]string // `user.` attributes set before the rename
	sizeBytes int64
	q         *creditQueue
}

func fileWrite(c *conn, raw json.RawMessage) (any, func(), error) {
	p := struct {
		Path     string
		StreamID uint32 `json:"streamId"`
		Mode     *uint32
		Parents  *bool
		Append   bool
		Owner    string
		Xattrs   map[string]string
	}{}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkPath(p.Path); err != nil {
		return nil, nil, err
	}
	if err := checkXattrs(p.Xattrs); err != nil {
		return nil, nil, err
	}
	own, err := resolveOwner(p.Owner)
	if err != nil {
		return nil, nil, err
	}
	mode := os.FileMode(0o644)
	if p.Mode != nil {
		mode = fileModeOf(*p.Mode)
	}
	dir := filepath.Dir(p.Path)
	if p.Parents == nil || *p.Parents {
		if _, err := mkdirChain(dir, true, own); err != nil {
			return nil, nil, mapErr(err)
		}
	}
	if st, err := os.Stat(p.Path); err == nil && st.IsDir() {
		return nil, nil, errorf("is_a_directory", "%s is a directory", p.Path)
	}
	ws := &writeStream{c: c, id: p.StreamID, path: p.Path, mode: mode, owner: own, append: p.Append, xattrs: p.Xattrs}
	if p.Append {
		// Appending in place: copying the whole file to a temporary would make repeated
		// appends quadratic; appended bytes only become visible as they are written.
		ws.f, err = os.OpenFile(p.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, mode)
	} else {
		var suffix [6]byte
		rand.Read(suffix[:])
		ws.tmp = filepath.Join(dir, "."+filepath.Base(p.Path)+".sandglass-"+hex.EncodeToString(suffix[:]))
		ws.f, err = os.OpenFile(ws.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	}
	if err != nil {
		return nil, nil, mapErr(err)
	}
	ws.q = newCreditQueue(func(n int) { c.sendWindow(p.StreamID, n) })
	if err := c.addStream(p.StreamID, ws); err != nil {
		ws.discard()
		return nil, nil, err
	}
	return map[string]any{"window": hostWindowBytes}, func() { go ws.run() }, nil
}

func (ws *writeStream) data(p []byte) { ws.q.push(p) }
func (ws *writeStream) window(uint32) {}

func (ws *writeStream) end(payload []byte) {
	ws.c.removeStream(ws.id, ws)
	if len(payload) > 0 {
		var e struct{ Error *protoError }
		if json.Unmarshal(payload, &e) == nil && e.Error != nil {
			ws.q.close(fmt.Errorf("host aborted the write: %s", e.Error.Message))
		} else {
			ws.q.close(fmt.Errorf("host aborted the write"))
		}
		return
	}
	ws.q.close(nil)
}

// run writes the queued bytes until END, then commits; a failure is reported at once (the host stops sending).
func (ws *writeStream) run() {
	n, err := io.Copy(struct{ io.Writer }{ws.f}, ws.q)
	ws.sizeBytes = n
	if err == nil {
		err = ws.commit()
	}
	if err != nil {
		ws.c.removeStream(ws.id, ws)
		ws.discard()
		ws.c.sendJSON(frameEvent, 0, map[string]any{
			"event": "file.write_failed", "streamId": ws.id, "path": ws.path, "error": mapErr(err),
		})
		return
	}
	ws.c.sendJSON(frameEvent, 0, map[string]any{
		"event": "file.written", "streamId": ws.id, "path": ws.path, "sizeBytes": ws.sizeBytes,
	})
}

func (ws *writeStream) commit() error {
	if err := ws.f.Sync(); err != nil {
		return err
	}
	if ws.owner != nil {
		// Through the descriptor: no path a guest program could swap. Before the chmod, because a chown clears
		// setuid/setgid bits.
		if err := ws.f.Chown(int(ws.owner.uid), int(ws.owner.gid)); err != nil {
			return err
		}
	}
	// Before the rename, so the file appears with its metadata; through the descriptor, as the chown.
	if err := setXattrs(ws.f, ws.xattrs); err != nil {
		return err
	}
	if !ws.append {
		// The umask narrowed the mode given to open; the host asked for this one.
		if err := ws.f.Chmod(ws.mode); err != nil {
			return err
		}
	}
	if err := ws.f.Close(); err != nil {
		return err
	}
	ws.f = nil
	if ws.append {
		return nil
	}
	if err := os.Rename(ws.tmp, ws.path); err != nil {
		return err
	}
	// The rename is durable only once the directory is synced.
	if d, err := os.Open(filepath.Dir(ws.path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func (ws *writeStream) discard() {
	if ws.f != nil {
		ws.f.Close()
		ws.f = nil
	}
	if ws.tmp != "" {
		os.Remove(ws.tmp)
	}
}

// stop is called when the connection ends mid-write: run discards, nothing reaches the target.
func (ws *writeStream) stop() { ws.q.close(errors.New("connection to the host ended")) }
