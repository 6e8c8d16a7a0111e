// Inbound port access (net.dial, net.ports) through a real protocol connection over in-memory pipes.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// guestServer listens on loopback like a program in the guest; each accepted connection goes to the channel.
func guestServer(t *testing.T, network, addr string) (*net.TCPListener, chan *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan *net.TCPConn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c.(*net.TCPConn)
		}
	}()
	return ln.(*net.TCPListener), accepted
}

type dialResult struct {
	RecvWindow int64  `json:"recvWindow"`
	Peer       string `json:"peer"`
}

func (h *testHost) dial(params map[string]any) (dialResult, *protoError) {
	h.t.Helper()
	res, e := h.call("net.dial", params)
	var r dialResult
	if e == nil {
		json.Unmarshal(res, &r)
	}
	return r, e
}

func TestNetDialRelaysBothWaysWithCredit(t *testing.T) {
	h := startTestAgent(t)
	ln, accepted := guestServer(t, "tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	r, e := h.dial(map[string]any{"streamId": 7, "port": port, "window": 8})
	if e != nil {
		t.Fatalf("net.dial: %v", e)
	}
	if r.RecvWindow != relayRecvWindow || !strings.HasPrefix(r.Peer, "127.0.0.1:") {
		t.Fatalf("net.dial answered %+v", r)
	}
	sc := <-accepted
	defer sc.Close()

	// Guest → host within the 8 bytes of credit granted: the rest waits for WINDOW.
	sc.Write([]byte("0123456789abcdef"))
	f := h.waitFor("DATA", func(f frame) bool { return f.typ == frameData && f.channel == 7 })
	if string(f.payload) != "01234567" {
		t.Fatalf("first DATA %q, want the 8 bytes of credit", f.payload)
	}
	var grant [4]byte
	binary.BigEndian.PutUint32(grant[:], 64)
	h.send(frameWindow, 7, grant[:])
	f = h.waitFor("DATA after WINDOW", func(f frame) bool { return f.typ == frameData && f.channel == 7 })
	if string(f.payload) != "89abcdef" {
		t.Fatalf("second DATA %q", f.payload)
	}

	// Host → guest, granted back once written.
	h.send(frameData, 7, []byte("GET / HTTP/1.1\r\n\r\n"))
	h.waitFor("WINDOW", func(f frame) bool { return f.typ == frameWindow && f.channel == 7 })
	h.send(frameEnd, 7, nil)
	got, err := io.ReadAll(sc)
	if err != nil || string(got) != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("guest server read %q, %v", got, err)
	}
	sc.CloseWrite()
	f = h.waitFor("END", func(f frame) bool { return f.channel == 7 && (f.typ == frameEnd || f.typ == frameData) })
	if f.typ != frameEnd || len(f.payload) != 0 {
		t.Fatalf("guest EOF gave type %d %q, want a plain END", f.typ, f.payload)
	}
}

func TestNetDialFallsBackToIPv6Loopback(t *testing.T) {
	h := startTestAgent(t)
	ln, accepted := guestServer(t, "tcp6", "[::1]:0")
	port := ln.Addr().(*net.TCPAddr).Port
	r, e := h.dial(map[string]any{"streamId": 9, "port": port})
	if e != nil {
		t.Fatalf("net.dial to a server on ::1 only: %v", e)
	}
	if !strings.HasPrefix(r.Peer, "[::1]:") {
		t.Fatalf("peer %q, want ::1", r.Peer)
	}
	(<-accepted).Close()
}

func TestNetDialRefusesWhatIsNotAGuestLoopbackService(t *testing.T) {
	h := startTestAgent(t)
	relayPort := h.listen()
	// A port nobody listens on: bind one, note it, close it.
	ln, _ := guestServer(t, "tcp", "127.0.0.1:0")
	closed := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cases := []struct {
		params map[string]any
		code   string
	}{
		{map[string]any{"streamId": 1, "port": 0}, "bad_request"},
		{map[string]any{"streamId": 1, "port": 65536}, "bad_request"},
		{map[string]any{"streamId": 1, "port": -1}, "bad_request"},
		{map[string]any{"streamId": 1}, "bad_request"},
		{map[string]any{"streamId": 1, "port": 80, "address": "10.0.0.1"}, "bad_request"},
		{map[string]any{"streamId": 1, "port": 80, "address": "127.0.0.2"}, "bad_request"},
		{map[string]any{"streamId": 1, "port": 80, "address": "localhost"}, "bad_request"},
		{map[string]any{"streamId": 1, "port": relayPort}, "permission_denied"},
		{map[string]any{"streamId": 1, "port": closed}, "not_found"},
		{map[string]any{"streamId": 1, "port": 80, "window": 1 << 40}, "bad_request"},
	}
	for _, c := range cases {
		if _, e := h.dial(c.params); e == nil || e.Code != c.code {
			t.Errorf("net.dial %v: %v, want %s", c.params, e, c.code)
		}
	}
	// An agent-space or used stream id is refused.
	srv, accepted := guestServer(t, "tcp", "127.0.0.1:0")
	srvPort := srv.Addr().(*net.TCPAddr).Port
	if _, e := h.dial(map[string]any{"streamId": agentStreamBit | 1, "port": srvPort}); e == nil || e.Code != "bad_request" {
		t.Fatalf("net.dial with an agent-space stream id: %v, want bad_request", e)
	}
	if _, e := h.dial(map[string]any{"streamId": 5, "port": srvPort}); e != nil {
		t.Fatal(e)
	}
	defer (<-accepted).Close()
	if _, e := h.dial(map[string]any{"streamId": 5, "port": srvPort}); e == nil || e.Code != "bad_request" {
		t.Fatalf("net.dial with a stream id in use: %v, want bad_request", e)
	}
}

// fullAcceptQueue is a server on 127.0.0.1 that never accepts, its accept queue filled: the kernel drops further SYNs,
// as it does for a busy server with a small listen backlog (python3 -m http.server's is 5).
func fullAcceptQueue(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("filling the accept queue: %v", err)
			}
			return sa.(*syscall.SockaddrInet4).Port
		}
		t.Cleanup(func() { c.Close() })
		if i > 64 {
			t.Skip("the kernel never dropped a SYN for a full accept queue")
		}
	}
}

func TestNetDialReportsAFullAcceptQueueAsATimeoutNotAClosedPort(t *testing.T) {
	saved := dialTimeout
	dialTimeout = 300 * time.Millisecond
	t.Cleanup(func() { dialTimeout = saved })
	h := startTestAgent(t)
	port := fullAcceptQueue(t)
	// 127.0.0.1 times out and ::1 refuses: the port is busy, not closed.
	if _, e := h.dial(map[string]any{"streamId": 3, "port": port}); e == nil || e.Code != "timeout" {
		t.Fatalf("net.dial to a server whose accept queue is full: %v, want timeout", e)
	}
}

func TestNetDialConnectionResetByHello(t *testing.T) {
	h := startTestAgent(t)
	ln, accepted := guestServer(t, "tcp", "127.0.0.1:0")
	if _, e := h.dial(map[string]any{"streamId": 3, "port": ln.Addr().(*net.TCPAddr).Port}); e != nil {
		t.Fatal(e)
	}
	sc := <-accepted
	defer sc.Close()
	if _, e := h.call("hello", map[string]any{"version": 1}); e != nil {
		t.Fatal(e)
	}
	if _, err := io.ReadAll(sc); err == nil {
		t.Fatal("guest server saw a clean EOF after hello, want a reset")
	}
}

func TestNetPortsListsListenersButNotTheRelay(t *testing.T) {
	h := startTestAgent(t)
	relayPort := h.listen()
	ln, _ := guestServer(t, "tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	res, e := h.call("net.ports", nil)
	if e != nil {
		t.Fatalf("net.ports: %v", e)
	}
	var r struct{ Ports []listeningPort }
	json.Unmarshal(res, &r)
	found := false
	for _, p := range r.Ports {
		if p.Port == relayPort {
			t.Fatalf("net.ports lists the egress relay's port %d", relayPort)
		}
		if p.Port == port && p.Address == "127.0.0.1" {
			found = true
		}
	}
	if !found {
		t.Fatalf("net.ports %+v lacks 127.0.0.1:%d", r.Ports, port)
	}
}

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]listeningPort{
		"0100007F:1F90":                         {Port: 8080, Address: "127.0.0.1"},
		"00000000:0050":                         {Port: 80, Address: "0.0.0.0"},
		"00000000000000000000000001000000:0BB8": {Port: 3000, Address: "::1"},
		"00000000000000000000000000000000:0016": {Port: 22, Address: "::"},
	} {
		if got, ok := parseProcAddr(in); !ok || got != want {
			t.Errorf("parseProcAddr(%q) = %+v %v, want %+v", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "zz:0050", "0100007F", "0100007F:fffff", "01007F:0050"} {
		if _, ok := parseProcAddr(bad); ok {
			t.Errorf("parseProcAddr(%q) accepted", bad)
		}
	}
}
