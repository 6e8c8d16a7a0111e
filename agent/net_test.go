// Egress relay and env defaults through a real protocol connection over in-memory pipes.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type testHost struct {
	t       *testing.T
	a       *agent
	backlog []frame // frames waitFor passed over, searched first by later waits
	w       io.Writer
	frames  chan frame
	nextID  uint32
	close   func()
}

func startTestAgent(t *testing.T) *testHost {
	a := &agent{started: time.Now(), bootID: "test", procs: map[string]*proc{}, byPid: map[int]*proc{}, relays: map[*relay]struct{}{}}
	hostR, agentW := io.Pipe()
	agentR, hostW := io.Pipe()
	closeAll := closerFunc(func() error {
		hostR.Close()
		agentW.Close()
		agentR.Close()
		hostW.Close()
		return nil
	})
	go a.serveConn(agentR, agentW, closeAll)
	h := &testHost{t: t, a: a, w: hostW, frames: make(chan frame, 1024), close: func() { closeAll.Close() }}
	go func() {
		defer close(h.frames)
		for {
			f, err := readFrame(hostR)
			if err != nil {
				return
			}
			h.frames <- f
		}
	}()
	t.Cleanup(func() {
		h.call("net.close", nil)
		h.close()
	})
	if _, errObj := h.call("hello", map[string]any{"version": 1}); errObj != nil {
		t.Fatalf("hello: %v", errObj)
	}
	return h
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func (h *testHost) send(typ byte, channel uint32, payload []byte) {
	if _, err := h.w.Write(encodeFrame(typ, channel, payload)); err != nil {
		h.t.Errorf("write frame: %v", err)
	}
}

// waitFor returns the first frame matching pred, earlier ones first; the others wait in the backlog.
func (h *testHost) waitFor(what string, pred func(frame) bool) frame {
	h.t.Helper()
	for i, f := range h.backlog {
		if pred(f) {
			h.backlog = append(h.backlog[:i], h.backlog[i+1:]...)
			return f
		}
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-h.frames:
			if !ok {
				h.t.Fatalf("connection closed waiting for %s", what)
			}
			if pred(f) {
				return f
			}
			h.backlog = append(h.backlog, f)
		case <-timeout:
			h.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (h *testHost) call(method string, params any) (json.RawMessage, *protoError) {
	h.t.Helper()
	h.nextID++
	id := h.nextID
	payload, _ := json.Marshal(map[string]any{"method": method, "params": params})
	h.send(frameCall, id, payload)
	f := h.waitFor("reply to "+method, func(f frame) bool { return f.typ == frameReply && f.channel == id })
	var body struct {
		Result json.RawMessage `json:"result"`
		Error  *protoError     `json:"error"`
	}
	if err := json.Unmarshal(f.payload, &body); err != nil {
		h.t.Fatalf("reply to %s: %v", method, err)
	}
	return body.Result, body.Error
}

type netOpen struct {
	Event      string `json:"event"`
	Stream     uint32 `json:"stream"`
	Peer       string `json:"peer"`
	Window     int64  `json:"window"`
	RecvWindow int64  `json:"recvWindow"`
}

func (h *testHost) listen() int {
	h.t.Helper()
	res, errObj := h.call("net.listen", map[string]any{"port": 0, "address": "127.0.0.1"})
	if errObj != nil {
		h.t.Fatalf("net.listen: %v", errObj)
	}
	var r struct{ Port int }
	json.Unmarshal(res, &r)
	return r.Port
}

func (h *testHost) accept(port int) (*net.TCPConn, netOpen) {
	h.t.Helper()
	nc, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		h.t.Fatalf("dial: %v", err)
	}
	f := h.waitFor("net.open", func(f frame) bool { return f.typ == frameEvent && strings.Contains(string(f.payload), `"net.open"`) })
	var ev netOpen
	json.Unmarshal(f.payload, &ev)
	if ev.Peer != nc.LocalAddr().String() {
		h.t.Fatalf("peer %q, want %q", ev.Peer, nc.LocalAddr())
	}
	return nc.(*net.TCPConn), ev
}

func TestNetRelayBothWaysAndHalfClose(t *testing.T) {
	h := startTestAgent(t)
	port := h.listen()
	if again := h.listen(); again != port {
		t.Fatalf("second net.listen moved the listener from %d to %d", port, again)
	}
	nc, ev := h.accept(port)
	if ev.Stream&agentStreamBit == 0 || ev.Window != defaultWindowBytes || ev.RecvWindow != relayRecvWindow {
		t.Fatalf("net.open %+v: want an agent stream id, the default window and a 256 KiB receive window", ev)
	}

	nc.Write([]byte("from guest"))
	f := h.waitFor("DATA", func(f frame) bool { return f.typ == frameData && f.channel == ev.Stream })
	if string(f.payload) != "from guest" {
		t.Fatalf("DATA %q", f.payload)
	}
	h.send(frameData, ev.Stream, []byte("from host"))
	f = h.waitFor("WINDOW", func(f frame) bool { return f.typ == frameWindow && f.channel == ev.Stream })
	if got := binary.BigEndian.Uint32(f.payload); got != uint32(len("from host")) {
		t.Fatalf("granted %d, want the bytes written", got)
	}
	buf := make([]byte, 64)
	n, _ := nc.Read(buf)
	if string(buf[:n]) != "from host" {
		t.Fatalf("guest read %q", buf[:n])
	}

	nc.CloseWrite()
	f = h.waitFor("END", func(f frame) bool { return f.channel == ev.Stream && (f.typ == frameEnd || f.typ == frameData) })
	if f.typ != frameEnd || len(f.payload) != 0 {
		t.Fatalf("guest EOF gave type %d %q, want a plain END", f.typ, f.payload)
	}
	// The other direction still works after the guest's half-close.
	h.send(frameData, ev.Stream, []byte("late"))
	h.send(frameEnd, ev.Stream, nil)
	rest, err := io.ReadAll(nc)
	if err != nil || string(rest) != "late" {
		t.Fatalf("guest read %q, %v after the host's END", rest, err)
	}
	nc.Close()
}

func TestNetRelayResetByHelloListenerSurvives(t *testing.T) {
	h := startTestAgent(t)
	port := h.listen()
	nc, _ := h.accept(port)
	if _, e := h.call("hello", map[string]any{"version": 1}); e != nil {
		t.Fatal(e)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("guest read after hello: %v, want a reset", err)
	}
	nc2, ev := h.accept(port)
	defer nc2.Close()
	nc2.Write([]byte("x"))
	h.waitFor("DATA after hello", func(f frame) bool { return f.typ == frameData && f.channel == ev.Stream })
}

func TestNetRelayHostOverrunningItsWindowIsAborted(t *testing.T) {
	h := startTestAgent(t)
	nc, ev := h.accept(h.listen())
	defer nc.Close()
	nc.SetReadBuffer(4096) // the guest reads nothing: the agent's queue must fill past the window
	go func() {
		chunk := make([]byte, 64<<10)
		for i := 0; i < 256; i++ {
			if _, err := h.w.Write(encodeFrame(frameData, ev.Stream, chunk)); err != nil {
				return
			}
		}
	}()
	f := h.waitFor("END with error", func(f frame) bool { return f.typ == frameEnd && f.channel == ev.Stream })
	if !strings.Contains(string(f.payload), "bad_request") {
		t.Fatalf("END %q, want bad_request", f.payload)
	}
}

func TestNetCloseEndsConnectionsAndListener(t *testing.T) {
	h := startTestAgent(t)
	port := h.listen()
	nc, ev := h.accept(port)
	defer nc.Close()
	if _, e := h.call("net.close", nil); e != nil {
		t.Fatal(e)
	}
	f := h.waitFor("END", func(f frame) bool { return f.typ == frameEnd && f.channel == ev.Stream })
	if !strings.Contains(string(f.payload), "error") {
		t.Fatalf("END %q, want an error", f.payload)
	}
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		c.Close()
		t.Fatal("listener still accepts after net.close")
	}
}

func TestNetListenValidatesAndHostIDsStayBelowBit31(t *testing.T) {
	h := startTestAgent(t)
	for _, p := range []map[string]any{{}, {"port": 70000}, {"port": 1, "address": "localhost"}} {
		if _, e := h.call("net.listen", p); e == nil || e.Code != "bad_request" {
			t.Fatalf("net.listen %v: %v, want bad_request", p, e)
		}
	}
	if _, e := h.call("file.write", map[string]any{"path": t.TempDir() + "/f", "streamId": agentStreamBit | 1}); e == nil || e.Code != "bad_request" {
		t.Fatalf("file.write with an agent-space stream id: %v, want bad_request", e)
	}
}

func TestEnvDefaults(t *testing.T) {
	h := startTestAgent(t)
	if _, e := h.call("env.defaults", map[string]any{"env": map[string]string{"A": "1", "B": "2"}}); e != nil {
		t.Fatal(e)
	}
	if _, e := h.call("env.defaults", map[string]any{"env": map[string]string{"C": "3", "BAD=NAME": "x"}}); e == nil || e.Code != "bad_request" {
		t.Fatalf("bad name: %v", e)
	}
	u := &userInfo{name: "root", home: "/root"}
	env := strings.Join(buildEnv(u, map[string]string{"A": "1", "B": "2", "HOME": "/h"}, map[string]string{"B": "own"}, false), " ")
	for _, want := range []string{"A=1", "B=own", "HOME=/h", "LANG=C.UTF-8"} {
		if !strings.Contains(env, want) {
			t.Fatalf("env %q lacks %s", env, want)
		}
	}
}

// TestBringUpLoopback runs in a fresh network namespace, whose lo starts down; skipped unless root.
func TestBringUpLoopback(t *testing.T) {
	errc := make(chan error, 1)
	go func() {
		// The thread stays locked and dies with this goroutine, taking its namespace along.
		runtime.LockOSThread()
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			errc <- err
			return
		}
		defer ln.Close()
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
			errc <- errors.New("lo is already up in a new namespace")
			return
		}
		for i := 0; i < 2; i++ { // the second call finds lo up
			if err := bringUpLoopback(); err != nil {
				errc <- err
				return
			}
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		errc <- err
	}()
	err := <-errc
	if errors.Is(err, syscall.EPERM) {
		t.Skip("needs CAP_SYS_ADMIN for a network namespace")
	}
	if err != nil {
		t.Fatal(err)
	}
}
