// Egress relay: a TCP listener in the guest whose connections travel to the host as streams of the agent channel.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// relayRecvWindow is the credit the host starts with on a relayed connection's host→agent
// direction: what the agent buffers at most when the guest program reads slowly.
const relayRecvWindow = 256 << 10

type netListener struct {
	ln     *net.TCPListener
	ip     net.IP
	port   int
	window int64 // agent→host credit each relayed connection starts with
}

func netListen(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Port    *int   `json:"port"`
		Address string `json:"address"`
		Window  int64  `json:"window"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if p.Port == nil || *p.Port < 0 || *p.Port > 65535 {
		return nil, nil, errorf("bad_request", "port must be an integer from 0 to 65535")
	}
	if p.Address == "" {
		p.Address = "127.0.0.1"
	}
	ip := net.ParseIP(p.Address)
	if ip == nil {
		return nil, nil, errorf("bad_request", "address must be an IP address, got %q", p.Address)
	}
	if p.Window < 0 || p.Window > 64<<20 {
		return nil, nil, errorf("bad_request", "window must be between 1 and %d bytes", 64<<20)
	}
	if p.Window == 0 {
		p.Window = defaultWindowBytes
	}
	a := c.a
	a.netMu.Lock()
	defer a.netMu.Unlock()
	if l := a.listener; l != nil && l.ip.Equal(ip) && (*p.Port == 0 || *p.Port == l.port) {
		l.window = p.Window
		return map[string]any{"port": l.port}, nil, nil
	}
	// Bind first, so a failure leaves the current listener as it was.
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: *p.Port})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, errorf("busy", "%s:%d is already in use", p.Address, *p.Port)
		}
		return nil, nil, mapErr(err)
	}
	l := &netListener{ln: ln, ip: ip, port: ln.Addr().(*net.TCPAddr).Port, window: p.Window}
	if old := a.listener; old != nil {
		old.ln.Close() // its connections stay; only net.close ends them
	}
	a.listener = l
	go a.acceptLoop(l)
	return map[string]any{"port": l.port}, nil, nil
}

func netClose(c *conn, raw json.RawMessage) (any, func(), error) {
	a := c.a
	a.netMu.Lock()
	l := a.listener
	a.listener = nil
	relays := a.relays
	a.relays = map[*relay]struct{}{}
	a.netMu.Unlock()
	if l != nil {
		l.ln.Close()
	}
	for r := range relays {
		r.abort(errorf("io", "net.close closed the connection"))
	}
	return nil, nil, nil
}

func (a *agent) acceptLoop(l *netListener) {
	for {
		sock, err := l.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: let descriptors free up
			continue
		}
		a.relayAccepted(l, sock)
	}
}

// relayAccepted announces a guest connection to the host and starts relaying it. Without a host
// that has said hello the connection is reset at once, like a network that is down.
func (a *agent) relayAccepted(l *netListener, sock *net.TCPConn) {
	a.mu.Lock()
	c := a.cur
	a.mu.Unlock()
	if c == nil {
		resetSocket(sock)
		return
	}
	r := &relay{a: a, c: c, sock: sock, stopCh: make(chan struct{})}
	r.cond = sync.NewCond(&r.mu)
	id, ok := c.addAgentStream(r)
	if !ok {
		resetSocket(sock)
		return
	}
	r.id = id
	a.netMu.Lock()
	if a.listener != l {
		// net.close or a replacing net.listen won the race: this connection was never announced.
		a.netMu.Unlock()
		c.removeStream(id, r)
		resetSocket(sock)
		return
	}
	window := l.window
	a.relays[r] = struct{}{}
	a.netMu.Unlock()
	r.credit = newCredit(window)

	c.sendJSON(frameEvent, 0, map[string]any{
		"event": "net.open", "stream": id, "peer": sock.RemoteAddr().String(),
		"window": window, "recvWindow": relayRecvWindow,
	})
	if c.lookupStream(id) != r {
		// A hello reset the connection's streams around the event: if the host saw the event after
		// its hello, this END tells it the connection is gone; if not, it ignores an unknown stream.
		c.endStream(id, errorf("io", "connection reset"))
		r.kill()
		return
	}
	go r.pumpOut()
	go r.pumpIn()
}

func resetSocket(sock *net.TCPConn) {
	sock.SetLinger(0) // close with RST: programs see a reset, as on a network failure
	sock.Close()
}

// relay is one relayed guest connection: stream id in both directions. Guest → host DATA is
// sent within the host's WINDOW credit; host → guest DATA is queued and written by pumpIn, within
// the credit the agent grants, so a slow guest reader never blocks the connection's reader.
type relay struct {
	a      *agent
	c      *conn
	id     uint32
	sock   *net.TCPConn
	credit *credit
	stopCh chan struct{}

	mu       sync.Mutex
	cond     *sync.Cond
	queue    [][]byte // host bytes not yet written to the socket
	queued   int      // their total: never above relayRecvWindow
	hostEOF  bool     // the host sent END: shut the socket's write side after the queue
	outDone  bool     // guest EOF reached the host as END
	inDone   bool     // the socket's write side is shut
	finished bool     // socket closed, stream forgotten
}

func (r *relay) data(p []byte) {
	r.mu.Lock()
	if r.finished || r.hostEOF {
		r.mu.Unlock()
		return
	}
	if r.queued+len(p) > relayRecvWindow {
		r.mu.Unlock()
		r.abort(errorf("bad_request", "host sent more than its window on stream %d", r.id))
		return
	}
	r.queue = append(r.queue, p)
	r.queued += len(p)
	r.cond.Signal()
	r.mu.Unlock()
}

func (r *relay) window(n uint32) { r.credit.grant(int64(n)) }

// end is the host's half-close, or with an error payload its abort.
func (r *relay) end(payload []byte) {
	if len(payload) > 0 {
		r.kill()
		return
	}
	r.mu.Lock()
	r.hostEOF = true
	r.cond.Signal()
	r.mu.Unlock()
}

// stop: the protocol connection ended or was reset by hello; the guest program sees a reset.
func (r *relay) stop() { r.kill() }

// kill resets the socket and forgets the stream without sending anything.
func (r *relay) kill() { r.finish(true) }

// abort tells the host (END with error) and resets the socket.
func (r *relay) abort(err error) {
	if r.c.removeStream(r.id, r) {
		r.c.endStream(r.id, err)
	}
	r.kill()
}

func (r *relay) finish(reset bool) {
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		return
	}
	r.finished = true
	r.queue = nil
	r.cond.Broadcast()
	r.mu.Unlock()
	close(r.stopCh)
	r.c.removeStream(r.id, r)
	if reset {
		resetSocket(r.sock)
	} else {
		r.sock.Close()
	}
	r.a.netMu.Lock()
	delete(r.a.relays, r)
	r.a.netMu.Unlock()
}

// halfDone marks one direction finished; once both are, the socket closes normally.
func (r *relay) halfDone(out bool) {
	r.mu.Lock()
	if out {
		r.outDone = true
	} else {
		r.inDone = true
	}
	both := r.outDone && r.inDone
	r.mu.Unlock()
	if both {
		r.finish(false)
	}
}

// pumpOut sends what the guest program writes, within the host's credit.
func (r *relay) pumpOut() {
	for {
		n := r.credit.acquire(1, maxDataBytes, r.stopCh)
		if n == 0 {
			return
		}
		f := newFrame(frameData, r.id, n)
		got, err := r.sock.Read(f[frameHeaderBytes:])
		if got > 0 {
			f = f[:frameHeaderBytes+got]
			putHeader(f, frameData, r.id)
			if !r.c.send(f) {
				return // connection gone: its reset stops the relay
			}
		}
		r.credit.giveBack(n - got)
		if err == nil {
			continue
		}
		select {
		case <-r.stopCh:
			return
		default:
		}
		if err == io.EOF {
			r.c.endStream(r.id, nil)
			r.halfDone(true)
		} else {
			r.abort(errorf("io", "read from guest connection: %v", err))
		}
		return
	}
}

// pumpIn writes the host's bytes to the socket and grants the host credit for what was written.
func (r *relay) pumpIn() {
	var grant [4]byte
	for {
		r.mu.Lock()
		for len(r.queue) == 0 && !r.hostEOF && !r.finished {
			r.cond.Wait()
		}
		if r.finished {
			r.mu.Unlock()
			return
		}
		if len(r.queue) == 0 {
			r.mu.Unlock()
			r.sock.CloseWrite()
			r.halfDone(false)
			return
		}
		bufs := net.Buffers(r.queue)
		r.queue = nil
		r.mu.Unlock()
		total := 0
		for _, b := range bufs {
			total += len(b)
		}
		if _, err := bufs.WriteTo(r.sock); err != nil {
			select {
			case <-r.stopCh:
			default:
				r.abort(errorf("io", "write to guest connection: %v", err))
			}
			return
		}
		r.mu.Lock()
		r.queued -= total
		r.mu.Unlock()
		binary.BigEndian.PutUint32(grant[:], uint32(total))
		r.c.send(encodeFrame(frameWindow, r.id, grant[:]))
	}
}
