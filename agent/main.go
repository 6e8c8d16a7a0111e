// sandglass-agent: the guest agent. Initramfs /init, PID 1 of the sandbox, and protocol server.
package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const agentVersion = "0.1.0"

type agent struct {
	started time.Time
	bootID  string
	// syncSystem: sync may change the clock and the kernel entropy pool. Off for --serve-stdio
	// and --listen, which run on a developer's or CI host rather than in a guest.
	syncSystem bool

	mu    sync.Mutex
	procs map[string]*proc
	cur   *conn // the connection events go to; nil while the host is away
	// envDefaults is merged into every process started after env.defaults set it; replaced
	// wholesale and never mutated, so readers may keep the map after unlocking.
	envDefaults map[string]string

	// netMu guards the egress relay: the listener and every connection it relays (net.go).
	netMu    sync.Mutex
	listener *netListener
	relays   map[*relay]struct{}

	// forkMu orders fork+register against wait4 (see startProc and reap).
	forkMu sync.Mutex
	byPid  map[int]*proc

	// watchMu guards the inotify watcher (watch.go) and orders its events before fs.unwatch's REPLY.
	watchMu sync.Mutex
	watcher *watcher
}

var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"hello":         {fn: hello, inline: true},
		"ping":          {fn: ping, inline: true},
		"sync":          {fn: syncHost, inline: true},
		"proc.start":    {fn: procStart, inline: true},
		"proc.attach":   {fn: procAttach, inline: true},
		"proc.detach":   {fn: procDetach, inline: true},
		"proc.stdin":    {deferred: procStdin},
		"proc.signal":   {fn: procSignal, inline: true},
		"proc.resize":   {fn: procResize, inline: true},
		"proc.list":     {fn: procList, inline: true},
		"proc.forget":   {fn: procForget, inline: true},
		"file.stat":     {fn: fileStat},
		"file.list":     {fn: fileList},
		"file.mkdir":    {fn: fileMkdir},
		"file.remove":   {fn: fileRemove},
		"file.rename":   {fn: fileRename},
		"file.read":     {fn: fileRead},
		"file.write":    {fn: fileWrite, inline: true},
		"file.writeTar": {fn: fileWriteTar, inline: true},
		"file.readTar":  {fn: fileReadTar},
		"fs.watch":      {fn: fsWatchMethod},
		"fs.unwatch":    {fn: fsUnwatchMethod},
		"env.defaults":  {fn: envDefaults, inline: true},
		"disk.grow":     {fn: diskGrow},
		"net.listen":    {fn: netListen, inline: true},
		"net.close":     {fn: netClose, inline: true},
		"net.dial":      {fn: netDial},
		"net.ports":     {fn: netPorts},
		"sys.stats":     {fn: sysStats},
	}
}

func (a *agent) emit(ev map[string]any) {
	a.mu.Lock()
	c := a.cur
	a.mu.Unlock()
	if c != nil {
		c.sendJSON(frameEvent, 0, ev)
	}
}

// resyncMagic precedes the host's nonce in the resync marker (spec/agent-protocol.md, "Connection lifecycle").
const resyncMagic = "\xffSGRESYNC"

func hello(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Version int    `json:"version"`
		Resync  string `json:"resync"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if p.Version != 1 {
		return nil, nil, errorf("bad_request", "protocol version %d is not supported (this agent speaks 1)", p.Version)
	}
	if p.Resync != "" {
		nonce, err := hex.DecodeString(p.Resync)
		if err != nil || len(nonce) != 16 {
			return nil, nil, errorf("bad_request", "resync must be 32 hex digits")
		}
		// Raw bytes ahead of the REPLY: after a restore the host may first receive the tail of frames written
		// before the snapshot; it discards everything up to this marker, which only this hello can produce.
		c.send(append([]byte(resyncMagic), nonce...))
	}
	c.resetStreams()
	c.mu.Lock()
	c.helloOK = true
	c.mu.Unlock()
	return map[string]any{
		"version": 1, "agentVersion": agentVersion, "bootId": c.a.bootID,
		"uptimeMs": time.Since(c.a.started).Milliseconds(),
	}, nil, nil
}

func ping(c *conn, raw json.RawMessage) (any, func(), error) { return nil, nil, nil }

func syncHost(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		TimeUnixNs string `json:"timeUnixNs"`
		Entropy    string `json:"entropy"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	ns, err := strconv.ParseInt(p.TimeUnixNs, 10, 64)
	if err != nil || ns <= 0 {
		return nil, nil, errorf("bad_request", "timeUnixNs must be a positive decimal string")
	}
	entropy, err := base64.StdEncoding.DecodeString(p.Entropy)
	if err != nil || len(entropy) < 32 || len(entropy) > 4096 {
		return nil, nil, errorf("bad_request", "entropy must be base64 of 32 to 4096 bytes")
	}
	if !c.a.syncSystem {
		return map[string]any{"skipped": true}, nil, nil
	}
	if err := setRealtimeClock(ns); err != nil {
		return nil, nil, errorf("permission_denied", "set clock: %v", err)
	}
	if err := addEntropy(entropy); err != nil {
		return nil, nil, errorf("permission_denied", "seed kernel: %v", err)
	}
	return nil, nil, nil
}

// serveConn runs one connection to completion; it becomes the target of events meanwhile.
func (a *agent) serveConn(r io.Reader, w io.Writer, closer io.Closer) error {
	c := newConn(a, closer)
	a.mu.Lock()
	a.cur = c
	a.mu.Unlock()
	err := c.serve(r, w)
	a.mu.Lock()
	if a.cur == c {
		a.cur = nil
	}
	a.mu.Unlock()
	return err
}

// servePort serves the virtio-serial port forever. EOF means the host side went away (gateway
// restart, or a snapshot restored in a new VMM): reopen every 10 ms, processes keep running.
func (a *agent) servePort(path string) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		a.serveConn(f, f, f)
		f.Close()
		time.Sleep(10 * time.Millisecond)
	}
}

// serveUnix accepts one connection at a time, like the port, for tests and tooling.
func (a *agent) serveUnix(path string) error {
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		a.serveConn(nc, nc, nc)
	}
}

// killAll stops every process group we started; used when a host-side agent exits so tests do
// not leak processes. In a guest the agent never exits.
func (a *agent) killAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.procs {
		syscall.Kill(-p.pid, syscall.SIGKILL)
	}
}

func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func main() {
	serveStdio := flag.Bool("serve-stdio", false, "speak the protocol on stdin/stdout (tests)")
	listen := flag.String("listen", "", "serve connections on unix:/path, one at a time")
	port := flag.String("port", "", "serve this character device instead of the virtio port named agent")
	syncSystem := flag.Bool("sync-system", false, "let sync set the clock and seed the kernel outside a guest")
	flag.Parse()

	pid1 := os.Getpid() == 1
	if pid1 {
		if _, err := os.Stat("/modules.order"); err == nil {
			runInitramfs()
			return
		}
		setupRoot()
	}
	a := &agent{
		started: time.Now(), bootID: readBootID(), syncSystem: *syncSystem || pid1,
		procs: map[string]*proc{}, byPid: map[int]*proc{}, relays: map[*relay]struct{}{},
	}
	go a.reapLoop()

	switch {
	case *serveStdio:
		fmt.Fprintln(os.Stderr, "sandglass-agent ready")
		a.serveConn(os.Stdin, os.Stdout, nil)
		a.killAll()
	case *listen != "":
		path := strings.TrimPrefix(*listen, "unix:")
		if path == *listen {
			fmt.Fprintln(os.Stderr, "sandglass-agent: --listen takes unix:/path")
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "sandglass-agent ready")
		if err := a.serveUnix(path); err != nil {
			fmt.Fprintf(os.Stderr, "sandglass-agent: %v\n", err)
			os.Exit(1)
		}
	default:
		path := *port
		if path == "" {
			var err error
			if path, err = findAgentPort(); err != nil {
				if pid1 {
					fatalBoot("%v", err)
				}
				fmt.Fprintf(os.Stderr, "sandglass-agent: %v\n", err)
				os.Exit(1)
			}
		}
		consoleLine("sandglass-agent ready")
		a.servePort(path)
	}
}
