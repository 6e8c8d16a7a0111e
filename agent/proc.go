// Processes started for the host: spawning, output rings, attach streams, stdin, signals, exit.
package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	defaultBufferBytes = 8 << 20
	maxBufferBytes     = 64 << 20
	basePath           = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// outputGrace is how long exit reporting waits for output pipes to reach EOF after the
	// process itself exited. A background grandchild that inherited stdout keeps the pipe open
	// forever; we must not hold proc.exit hostage to it. Its later output still lands in the ring.
	outputGrace = 200 * time.Millisecond
)

type proc struct {
	id          string
	pid         int
	argv        []string
	pty         bool
	bufferBytes int

	mu      sync.Mutex
	ring    *ring
	digests outputDigests
	changed chan struct{} // closed and replaced whenever output arrives or the process finishes
	done    bool          // exit reported: attach streams END once they have sent everything
	status  syscall.WaitStatus

	reaped  chan struct{} // closed by the reaper
	readers sync.WaitGroup
	stdin   *stdinQueue // nil when stdin is /dev/null
	master  *os.File    // PTY master, nil for pipes
}

// broadcast wakes attach streams; call with p.mu held.
func (p *proc) broadcast() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *proc) exitInfo() (code any, sig any) {
	if !p.done {
		return nil, nil
	}
	if p.status.Signaled() {
		return nil, signalName(p.status.Signal())
	}
	return p.status.ExitStatus(), nil
}

type startParams struct {
	ID          string                    `json:"id"`
	Argv        []string                  `json:"argv"`
	Env         map[string]string         `json:"env"`
	Cwd         string                    `json:"cwd"`
	User        string                    `json:"user"`
	Stdin       bool                      `json:"stdin"`
	Pty         *struct{ Cols, Rows int } `json:"pty"`
	BufferBytes int                       `json:"bufferBytes"`
}

func procStart(c *conn, raw json.RawMessage) (any, func(), error) {
	var sp startParams
	if err := decodeParams(raw, &sp); err != nil {
		return nil, nil, err
	}
	p, err := c.a.startProc(&sp)
	if err != nil {
		return nil, nil, err
	}
	// Exit reporting starts after the REPLY is queued, so proc.exit never precedes it.
	return map[string]any{"pid": p.pid}, func() { go c.a.awaitExit(p) }, nil
}

func (a *agent) startProc(sp *startParams) (*proc, error) {
	if sp.ID == "" || len(sp.Argv) == 0 || sp.Argv[0] == "" {
		return nil, errorf("bad_request", "id and a non-empty argv are required")
	}
	if sp.BufferBytes == 0 {
		sp.BufferBytes = defaultBufferBytes
	}
	if sp.BufferBytes < 0 || sp.BufferBytes > maxBufferBytes {
		return nil, errorf("bad_request", "bufferBytes must be between 1 and %d", maxBufferBytes)
	}
	a.mu.Lock()
	_, dup := a.procs[sp.ID]
	a.mu.Unlock()
	if dup {
		return nil, errorf("bad_request", "process id %q is already in use", sp.ID)
	}

	u, err := lookupUser(sp.User)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defaults := a.envDefaults
	a.mu.Unlock()
	env := buildEnv(u, defaults, sp.Env, sp.Pty != nil)
	cwd := sp.Cwd
	if cwd == "" {
		cwd = u.home
		if st, err := os.Stat(cwd); err != nil || !st.IsDir() {
			cwd = "/"
		}
	} else if st, err := os.Stat(cwd); err != nil || !st.IsDir() {
		return nil, errorf("not_found", "cwd %s is not an existing directory", cwd)
	}
	path, err := lookPath(sp.Argv[0], envValue(env, "PATH"), cwd)
	if err != nil {
		return nil, err
	}

	p := &proc{
		id: sp.ID, argv: sp.Argv, pty: sp.Pty != nil, bufferBytes: sp.BufferBytes,
		ring: newRing(sp.BufferBytes), changed: make(chan struct{}), reaped: make(chan struct{}),
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if u.uid != uint32(os.Getuid()) || u.gid != uint32(os.Getgid()) {
		sys.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}
	}
	// childFiles are the descriptors only the child keeps; we close our copies after fork so
	// EOF/EIO on our ends means the child side is gone.
	var childFiles []*os.File
	var outputs []*os.File
	var outFds []byte
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	if sp.Pty != nil {
		master, slave, err := openPty()
		if err != nil {
			return nil, errorf("io", "open pty: %v", err)
		}
		if err := setWinsize(master, sp.Pty.Cols, sp.Pty.Rows); err != nil {
			master.Close()
			slave.Close()
			return nil, mapErr(err)
		}
		p.master = master
		p.stdin = newStdinQueue(master, true)
		childFiles = []*os.File{slave, slave, slave}
		outputs, outFds = []*os.File{master}, []byte{1}
		sys.Setctty = true
		sys.Ctty = 0 // a descriptor number in the child
	} else {
		var stdinChild *os.File
		if sp.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, errorf("io", "pipe: %v", err)
			}
			stdinChild = r
			p.stdin = newStdinQueue(w, false)
		} else if stdinChild, err = os.Open(os.DevNull); err != nil {
			return nil, errorf("io", "open %s: %v", os.DevNull, err)
		}
		outR, outW, err1 := os.Pipe()
		errR, errW, err2 := os.Pipe()
		if err1 != nil || err2 != nil {
			return nil, errorf("io", "pipe: %v %v", err1, err2)
		}
		childFiles = []*os.File{stdinChild, outW, errW}
		outputs, outFds = []*os.File{outR, errR}, []byte{1, 2}
	}
	attr := &syscall.ProcAttr{Dir: cwd, Env: env, Sys: sys}
	for _, f := range childFiles {
		attr.Files = append(attr.Files, f.Fd())
	}

	// The reaper holds forkMu while it waits, so a child that exits at once cannot be reaped
	// before its pid is registered.
	a.forkMu.Lock()
	pid, err := syscall.ForkExec(path, sp.Argv, attr)
	if err == nil {
		p.pid = pid
		a.byPid[pid] = p
	}
	a.forkMu.Unlock()
	closeAll(childFiles)
	if err != nil {
		closeAll(outputs)
		if p.stdin != nil {
			p.stdin.f.Close()
		}
		var errno syscall.Errno
		if errors.As(err, &errno) && errno == syscall.EPERM {
			return nil, errorf("permission_denied", "start %s as %s: %v", sp.Argv[0], u.name, err)
		}
		return nil, errorf("command_not_found", "cannot execute %s: %v", sp.Argv[0], err)
	}

	a.mu.Lock()
	if _, dup := a.procs[sp.ID]; dup {
		// Lost a race with a concurrent start of the same id: keep the first, stop this one.
		a.mu.Unlock()
		syscall.Kill(-pid, syscall.SIGKILL)
		return nil, errorf("bad_request", "process id %q is already in use", sp.ID)
	}
	a.procs[sp.ID] = p
	a.mu.Unlock()

	for i, f := range outputs {
		p.readers.Add(1)
		go p.pump(f, outFds[i])
	}
	if p.stdin != nil {
		go p.stdin.run()
	}
	return p, nil
}

// pump copies one output descriptor into the ring until EOF (EIO for a PTY whose slave closed).
func (p *proc) pump(f *os.File, fd byte) {
	defer p.readers.Done()
	if !p.pty {
		defer f.Close()
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.ring.write(fd, buf[:n])
			p.digests.add(fd, buf[:n])
			p.broadcast()
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (a *agent) awaitExit(p *proc) {
	<-p.reaped
	drained := make(chan struct{})
	go func() {
		p.readers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(outputGrace):
	}
	p.mu.Lock()
	p.done = true
	code, sig := p.exitInfo()
	outputBytes := p.ring.end
	digests := p.digests.summary()
	p.mu.Unlock()
	// The event is queued before attach streams can observe done, so their END follows it.
	a.emit(map[string]any{"event": "proc.exit", "id": p.id, "exitCode": code, "signal": sig, "outputBytes": outputBytes, "output": digests})
	p.mu.Lock()
	p.broadcast()
	p.mu.Unlock()
	if p.stdin != nil {
		p.stdin.close()
	}
	if p.master != nil {
		// Keep the master while a grandchild still holds the slave; its pump closes nothing.
		go func() {
			<-drained
			p.master.Close()
		}()
	}
}

// onReaped is called by the reaper (with forkMu held) with the wait status of p.pid.
func (p *proc) onReaped(ws syscall.WaitStatus) {
	p.mu.Lock()
	p.status = ws
	p.mu.Unlock()
	close(p.reaped)
}

func (a *agent) getProc(id string) (*proc, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.procs[id]
	if p == nil {
		return nil, errorf("not_found", "no process %q", id)
	}
	return p, nil
}

// attachStream follows one process's output on one stream.
type attachStream struct {
	*outStream
}

func procAttach(c *conn, raw json.RawMessage) (any, func(), error) {
	var ap struct {
		ID         string `json:"id"`
		StreamID   uint32 `json:"streamId"`
		FromOffset uint64 `json:"fromOffset"`
		Window     int64  `json:"window"`
	}
	if err := decodeParams(raw, &ap); err != nil {
		return nil, nil, err
	}
	p, err := c.a.getProc(ap.ID)
	if err != nil {
		return nil, nil, err
	}
	s := &attachStream{newOutStream(ap.Window)}
	if err := c.addStream(ap.StreamID, s); err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	start, end, exited := p.ring.start, p.ring.end, p.done
	p.mu.Unlock()
	from := ap.FromOffset
	if from < start {
		from = start
	}
	result := map[string]any{"startOffset": start, "endOffset": end, "exited": exited}
	return result, func() { go s.follow(c, ap.StreamID, p, from) }, nil
}

func (s *attachStream) follow(c *conn, id uint32, p *proc, from uint64) {
	defer c.removeStream(id, s)
	for {
		p.mu.Lock()
		avail := p.ring.end > from && p.ring.end > p.ring.start
		done, changed := p.done, p.changed
		p.mu.Unlock()
		if !avail {
			if done {
				if c.removeStream(id, s) {
					c.endStream(id, nil)
				}
				return
			}
			select {
			case <-changed:
				continue
			case <-s.stopCh:
				return
			case <-c.done:
				return
			}
		}
		// DATA payload: fd u8, offset u64, bytes. Credit counts whole payloads.
		const hdr = 9
		n := s.credit.acquire(hdr+1, hdr+maxDataBytes, s.stopCh)
		if n == 0 {
			return
		}
		p.mu.Lock()
		fd, off, b := p.ring.read(from, n-hdr)
		p.mu.Unlock()
		s.credit.giveBack(n - hdr - len(b))
		f := newFrame(frameData, id, hdr+len(b))
		f[frameHeaderBytes] = fd
		binary.BigEndian.PutUint64(f[frameHeaderBytes+1:], off)
		copy(f[frameHeaderBytes+hdr:], b)
		if !c.send(f) {
			return
		}
		from = off + uint64(len(b))
	}
}

func procDetach(c *conn, raw json.RawMessage) (any, func(), error) {
	var dp struct {
		StreamID uint32 `json:"streamId"`
	}
	if err := decodeParams(raw, &dp); err != nil {
		return nil, nil, err
	}
	if s := c.lookupStream(dp.StreamID); s != nil {
		if c.removeStream(dp.StreamID, s) {
			s.stop()
		}
	}
	return nil, nil, nil
}

// stdinQueue writes host-supplied stdin in order without ever blocking the connection reader:
// a process that does not read its stdin only delays the replies to its own proc.stdin calls.
type stdinQueue struct {
	f     *os.File
	isPty bool

	mu     sync.Mutex
	cond   *sync.Cond
	items  []stdinItem
	closed bool
}

type stdinItem struct {
	data []byte
	eof  bool
	done func(error)
}

func newStdinQueue(f *os.File, isPty bool) *stdinQueue {
	q := &stdinQueue{f: f, isPty: isPty}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *stdinQueue) push(it stdinItem) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		it.done(errorf("io", "stdin is closed"))
		return
	}
	q.items = append(q.items, it)
	q.cond.Signal()
	q.mu.Unlock()
}

// close fails what is still queued; the process has finished.
func (q *stdinQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Signal()
	q.mu.Unlock()
}

func (q *stdinQueue) run() {
	eofDone := false
	for {
		q.mu.Lock()
		for len(q.items) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.items) == 0 {
			q.mu.Unlock()
			break
		}
		it := q.items[0]
		q.items = q.items[1:]
		q.mu.Unlock()
		var err error
		if eofDone {
			err = errorf("io", "stdin was already closed")
		} else if len(it.data) > 0 {
			if _, werr := q.f.Write(it.data); werr != nil {
				err = errorf("io", "write stdin: %v", werr)
			}
		}
		if err == nil && it.eof && !q.isPty && !eofDone {
			q.f.Close()
			eofDone = true
		}
		it.done(err)
	}
	q.mu.Lock()
	for _, it := range q.items {
		it.done(errorf("io", "process has exited"))
	}
	q.items = nil
	q.mu.Unlock()
	if !q.isPty && !eofDone {
		q.f.Close()
	}
}

// procStdin runs inline so writes keep the order of the calls; it replies once the bytes are
// written, which gives the host backpressure from a process that reads slowly.
func procStdin(c *conn, raw json.RawMessage, reply func(any, error)) {
	var sp struct {
		ID   string `json:"id"`
		Data string `json:"data"`
		EOF  bool   `json:"eof"`
	}
	if err := decodeParams(raw, &sp); err != nil {
		reply(nil, err)
		return
	}
	data, err := base64.StdEncoding.DecodeString(sp.Data)
	if err != nil {
		reply(nil, errorf("bad_request", "data is not base64: %v", err))
		return
	}
	p, err := c.a.getProc(sp.ID)
	if err != nil {
		reply(nil, err)
		return
	}
	if p.stdin == nil {
		reply(nil, errorf("bad_request", "process %q was started without stdin", sp.ID))
		return
	}
	// The offset at arrival, not at write: a replay delivers these bytes once the output reaches it again.
	off := p.outputOffset()
	p.stdin.push(stdinItem{data: data, eof: sp.EOF, done: func(err error) {
		if err != nil {
			reply(nil, err)
			return
		}
		reply(map[string]any{"outputOffset": off}, nil)
	}})
}

// outputDigests hashes all of a process's output as it is written, which the ring cannot (it drops the oldest
// bytes): a replay compares its output with the original's by these, and tells a different interleaving of the
// same stdout and stderr (per-stream digests equal, the whole differs) from different output.
type outputDigests struct {
	all, stdout, stderr hash.Hash
	stdoutBytes         uint64
	stderrBytes         uint64
}

func (d *outputDigests) add(fd byte, b []byte) {
	if d.all == nil {
		d.all, d.stdout, d.stderr = sha256.New(), sha256.New(), sha256.New()
	}
	d.all.Write(b)
	if fd == 2 {
		d.stderr.Write(b)
		d.stderrBytes += uint64(len(b))
	} else {
		d.stdout.Write(b)
		d.stdoutBytes += uint64(len(b))
	}
}

func (d *outputDigests) summary() map[string]any {
	if d.all == nil {
		d.add(1, nil)
	}
	hex := func(h hash.Hash) string { return fmt.Sprintf("%x", h.Sum(nil)) }
	return map[string]any{
		"sha256": hex(d.all), "stdoutSha256": hex(d.stdout), "stderrSha256": hex(d.stderr),
		"stdoutBytes": d.stdoutBytes, "stderrBytes": d.stderrBytes,
	}
}

// outputOffset is the total output the process has written so far.
func (p *proc) outputOffset() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ring.end
}

func procSignal(c *conn, raw json.RawMessage) (any, func(), error) {
	var sp struct {
		ID     string `json:"id"`
		Signal string `json:"signal"`
	}
	if err := decodeParams(raw, &sp); err != nil {
		return nil, nil, err
	}
	sig, ok := signalsByName[sp.Signal]
	if !ok {
		return nil, nil, errorf("bad_request", "unsupported signal %q", sp.Signal)
	}
	p, err := c.a.getProc(sp.ID)
	if err != nil {
		return nil, nil, err
	}
	// The process is a session (and group) leader, so -pid reaches everything it started that
	// stayed in its group, even after the leader itself exited.
	off := p.outputOffset()
	if err := syscall.Kill(-p.pid, sig); err != nil && err != syscall.ESRCH {
		return nil, nil, errorf("io", "kill: %v", err)
	}
	return map[string]any{"outputOffset": off}, nil, nil
}

func procResize(c *conn, raw json.RawMessage) (any, func(), error) {
	var rp struct {
		ID   string `json:"id"`
		Cols int    `json:"cols"`
		Rows int    `json:"rows"`
	}
	if err := decodeParams(raw, &rp); err != nil {
		return nil, nil, err
	}
	p, err := c.a.getProc(rp.ID)
	if err != nil {
		return nil, nil, err
	}
	if p.master == nil {
		return nil, nil, errorf("bad_request", "process %q has no pty", rp.ID)
	}
	off := p.outputOffset()
	if err := setWinsize(p.master, rp.Cols, rp.Rows); err != nil {
		return nil, nil, mapErr(err)
	}
	return map[string]any{"outputOffset": off}, nil, nil
}

func procList(c *conn, raw json.RawMessage) (any, func(), error) {
	c.a.mu.Lock()
	ps := make([]*proc, 0, len(c.a.procs))
	for _, p := range c.a.procs {
		ps = append(ps, p)
	}
	c.a.mu.Unlock()
	sort.Slice(ps, func(i, j int) bool { return ps[i].id < ps[j].id })
	list := make([]map[string]any, 0, len(ps))
	for _, p := range ps {
		p.mu.Lock()
		code, sig := p.exitInfo()
		list = append(list, map[string]any{
			"id": p.id, "pid": p.pid, "argv": p.argv, "exited": p.done, "exitCode": code,
			"signal": sig, "outputBytes": p.ring.end, "pty": p.pty,
		})
		p.mu.Unlock()
	}
	return map[string]any{"processes": list}, nil, nil
}

func procForget(c *conn, raw json.RawMessage) (any, func(), error) {
	var fp struct {
		ID string `json:"id"`
	}
	if err := decodeParams(raw, &fp); err != nil {
		return nil, nil, err
	}
	p, err := c.a.getProc(fp.ID)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if !done {
		return nil, nil, errorf("busy", "process %q is still running", fp.ID)
	}
	c.a.mu.Lock()
	delete(c.a.procs, fp.ID)
	c.a.mu.Unlock()
	c.a.forkMu.Lock()
	if c.a.byPid[p.pid] == p {
		delete(c.a.byPid, p.pid)
	}
	c.a.forkMu.Unlock()
	return nil, nil, nil
}

// envDefaults replaces the variables merged into every process started afterwards: the egress
// proxy's address, secret placeholders and CA bundle paths reach every program without each
// proc.start repeating them.
func envDefaults(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Env map[string]string `json:"env"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	env := make(map[string]string, len(p.Env))
	for k, v := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, nil, errorf("bad_request", "env: name %q must be non-empty without '=' or NUL", k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, nil, errorf("bad_request", "env: value of %s must not contain NUL", k)
		}
		env[k] = v
	}
	c.a.mu.Lock()
	c.a.envDefaults = env
	c.a.mu.Unlock()
	return nil, nil, nil
}

type userInfo struct {
	name     string
	uid, gid uint32
	home     string
	groups   []uint32
}

// lookupUser resolves a name or numeric uid via /etc/passwd (os/user is pure Go without cgo).
func lookupUser(spec string) (*userInfo, error) {
	if spec == "" {
		spec = "root"
	}
	u, err := user.Lookup(spec)
	if err != nil {
		if _, numErr := strconv.Atoi(spec); numErr == nil {
			u, err = user.LookupId(spec)
		}
	}
	if err != nil {
		if spec == "root" || spec == "0" {
			// A root filesystem without /etc/passwd still has root.
			return &userInfo{name: "root", home: "/root"}, nil
		}
		return nil, errorf("bad_request", "unknown user %q", spec)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	info := &userInfo{name: u.Username, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				info.groups = append(info.groups, uint32(n))
			}
		}
	}
	if info.home == "" {
		info.home = "/"
	}
	return info, nil
}

// buildEnv layers the base environment, the env.defaults and the process's own env, later winning.
func buildEnv(u *userInfo, defaults, extra map[string]string, pty bool) []string {
	m := map[string]string{
		"PATH": basePath, "HOME": u.home, "USER": u.name, "LOGNAME": u.name,
		"SHELL": "/bin/sh", "LANG": "C.UTF-8",
	}
	if pty {
		m["TERM"] = "xterm-256color"
	}
	for k, v := range defaults {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	env := make([]string, 0, len(m))
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return kv[len(key)+1:]
		}
	}
	return ""
}

// lookPath finds argv[0] in the child's PATH (not the agent's): the host may override PATH.
func lookPath(name, path, cwd string) (string, error) {
	isExec := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
	}
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if !isExec(p) {
			return "", errorf("command_not_found", "%s: not an executable file", name)
		}
		return p, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		if p := filepath.Join(dir, name); isExec(p) {
			return p, nil
		}
	}
	return "", errorf("command_not_found", "%s: command not found", name)
}

var signalsByName = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "SIGINT": syscall.SIGINT,
	"SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT, "SIGUSR1": syscall.SIGUSR1,
	"SIGUSR2": syscall.SIGUSR2,
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}
