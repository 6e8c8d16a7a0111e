// One protocol connection: a reader that dispatches frames, a single writer goroutine, and the
// connection's streams. Processes outlive connections; streams do not.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
)

// protoError is an error reply with one of the spec's codes.
type protoError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *protoError) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *protoError {
	return &protoError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// handler answers one method. It returns the result and, optionally, work that must start only
// after the REPLY is queued (e.g. DATA of a file.read must follow its REPLY).
type handler struct {
	fn func(c *conn, params json.RawMessage) (result any, after func(), err error)
	// inline handlers run on the reader goroutine: they are quick, and running them in frame
	// order matters (a stream must exist before its first DATA frame; stdin writes keep order).
	// The others run on their own goroutine so slow filesystem work never stalls the reader.
	inline bool
	// deferred handlers run inline but answer later through reply (proc.stdin).
	deferred func(c *conn, params json.RawMessage, reply func(any, error))
}

// stream is one side of a flow named by a stream id on this connection.
type stream interface {
	data(p []byte)       // DATA from the host
	window(bytes uint32) // WINDOW credit from the host
	end(payload []byte)  // END from the host
	stop()               // connection over or reset by hello: release everything, send nothing
}

type conn struct {
	a    *agent
	out  chan []byte
	done chan struct{}
	// bulk carries file.read payloads spliced into the port (splice_linux.go); port is nil where that is not possible.
	bulk chan *spliceJob
	port syscall.RawConn

	closeOnce sync.Once
	closer    io.Closer

	mu      sync.Mutex
	helloOK bool
	streams map[uint32]stream
	// lastAgentID is the low 31 bits of the last stream id the agent allocated (agentStreamBit set).
	lastAgentID uint32
}

// agentStreamBit marks stream ids the agent allocates (net.open); host-chosen ids never have it.
const agentStreamBit = 1 << 31

func newConn(a *agent, closer io.Closer) *conn {
	return &conn{
		a:       a,
		out:     make(chan []byte, 256),
		done:    make(chan struct{}),
		bulk:    make(chan *spliceJob),
		closer:  closer,
		streams: map[uint32]stream{},
	}
}

// serve runs the connection until the transport fails or reaches EOF, then drops its streams.
func (c *conn) serve(r io.Reader, w io.Writer) error {
	c.port = splicePort(w)
	writerDone := make(chan struct{})
	go func() {
		c.writeLoop(w)
		close(writerDone)
	}()
	err := c.readLoop(r)
	c.shutdown()
	<-writerDone
	c.resetStreams()
	return err
}

func (c *conn) shutdown() {
	c.closeOnce.Do(func() {
		close(c.done)
		if c.closer != nil {
			// Unblocks the reader when the writer failed first.
			c.closer.Close()
		}
	})
}

// send queues a complete frame; it returns false once the connection is gone. Blocking here is
// the transport's backpressure, felt only by producers of output (never by other streams' state).
func (c *conn) send(frame []byte) bool {
	select {
	case c.out <- frame:
		return true
	case <-c.done:
		return false
	}
}

func (c *conn) sendJSON(typ byte, channel uint32, v any) bool {
	payload, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own result types are marshalled
	}
	return c.send(encodeFrame(typ, channel, payload))
}

func (c *conn) writeLoop(w io.Writer) {
	bw := bufio.NewWriterSize(w, 256<<10)
	for {
		select {
		case f := <-c.out:
			if _, err := bw.Write(f); err != nil {
				c.shutdown()
				return
			}
			// Flush only when nothing else is queued, so bursts share one write syscall.
			if len(c.out) == 0 {
				if err := bw.Flush(); err != nil {
					c.shutdown()
					return
				}
			}
		case j := <-c.bulk:
			// Frames queued before it go first (a file.read's REPLY precedes its DATA); then its header and its
			// payload, back to back.
			var err error
			for len(c.out) > 0 && err == nil {
				_, err = bw.Write(<-c.out)
			}
			if err == nil {
				_, err = bw.Write(j.header)
			}
			if err == nil {
				err = bw.Flush()
			}
			if err == nil {
				err = writeSpliced(c.port, j)
			}
			j.done <- err
			if err != nil {
				c.shutdown()
				return
			}
		case <-c.done:
			return
		}
	}
}

func (c *conn) readLoop(r io.Reader) error {
	br := bufio.NewReaderSize(r, 256<<10)
	for {
		f, err := readFrame(br)
		if err != nil {
			return err
		}
		switch f.typ {
		case frameCall:
			c.call(f.channel, f.payload)
		case frameData, frameEnd, frameWindow:
			c.mu.Lock()
			s := c.streams[f.channel]
			c.mu.Unlock()
			if s == nil {
				continue // closed a moment ago, or never ours: the spec says ignore
			}
			switch f.typ {
			case frameData:
				s.data(f.payload)
			case frameEnd:
				s.end(f.payload)
			case frameWindow:
				if len(f.payload) == 4 {
					s.window(binary.BigEndian.Uint32(f.payload))
				}
			}
		}
	}
}

func (c *conn) call(id uint32, payload []byte) {
	var req struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(payload, &req); err != nil {
		c.reply(id, nil, errorf("bad_request", "CALL payload is not JSON: %v", err))
		return
	}
	if len(req.Params) == 0 || string(req.Params) == "null" {
		req.Params = json.RawMessage("{}")
	}
	h, ok := handlers[req.Method]
	if !ok {
		c.reply(id, nil, errorf("unknown_method", "unknown method %q", req.Method))
		return
	}
	c.mu.Lock()
	helloOK := c.helloOK
	c.mu.Unlock()
	if !helloOK && req.Method != "hello" {
		c.reply(id, nil, errorf("bad_request", "the first call of a connection must be hello, got %s", req.Method))
		return
	}
	if h.deferred != nil {
		h.deferred(c, req.Params, func(result any, err error) { c.reply(id, result, err) })
		return
	}
	run := func() {
		result, after, err := h.fn(c, req.Params)
		c.reply(id, result, err)
		if err == nil && after != nil {
			after()
		}
	}
	if h.inline {
		run()
	} else {
		go run()
	}
}

func (c *conn) reply(id uint32, result any, err error) {
	if err != nil {
		var pe *protoError
		if !errors.As(err, &pe) {
			pe = errorf("io", "%v", err)
		}
		c.sendJSON(frameReply, id, map[string]any{"error": pe})
		return
	}
	if result == nil {
		result = struct{}{}
	}
	c.sendJSON(frameReply, id, map[string]any{"result": result})
}

// addStream registers s under id; ids are chosen by the host and must not be in use.
func (c *conn) addStream(id uint32, s stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id == 0 || id&agentStreamBit != 0 {
		return errorf("bad_request", "streamId must be between 1 and 2^31-1")
	}
	if _, busy := c.streams[id]; busy {
		return errorf("bad_request", "streamId %d is already in use", id)
	}
	c.streams[id] = s
	return nil
}

// addAgentStream registers s under a fresh id from the agent's half of the id space. It fails
// before hello (the host is not listening to this connection yet) and once the connection is
// over: shutdown closes done before the final resetStreams, so a stream added while done is
// still open is always stopped by it.
func (c *conn) addAgentStream(s stream) (uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return 0, false
	default:
	}
	if !c.helloOK {
		return 0, false
	}
	for {
		c.lastAgentID = c.lastAgentID%(agentStreamBit-1) + 1
		id := agentStreamBit | c.lastAgentID
		if _, busy := c.streams[id]; !busy {
			c.streams[id] = s
			return id, true
		}
	}
}

// removeStream forgets id if it still names s (a reset may already have replaced it).
func (c *conn) removeStream(id uint32, s stream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams[id] != s {
		return false
	}
	delete(c.streams, id)
	return true
}

func (c *conn) lookupStream(id uint32) stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// resetStreams ends the connection's streams and its directory watches.
func (c *conn) resetStreams() {
	c.mu.Lock()
	old := c.streams
	c.streams = map[uint32]stream{}
	c.mu.Unlock()
	for _, s := range old {
		s.stop()
	}
	c.a.unwatchConn(c)
}

// live reports whether the connection still serves: hello done and not shut down.
func (c *conn) live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return false
	default:
		return c.helloOK
	}
}

// sendWindow grants the host n more bytes of credit on a host→agent stream.
func (c *conn) sendWindow(id uint32, n int) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	c.send(encodeFrame(frameWindow, id, b[:]))
}

// endStream sends END, with an error payload when err is not nil.
func (c *conn) endStream(id uint32, err error) {
	if err == nil {
		c.send(encodeFrame(frameEnd, id, nil))
		return
	}
	var pe *protoError
	if !errors.As(err, &pe) {
		pe = mapErr(err)
	}
	c.sendJSON(frameEnd, id, map[string]any{"error": pe})
}

// credit is the flow-control window of one agent→host stream.
type credit struct {
	mu    sync.Mutex
	bytes int64
	wake  chan struct{}
}

func newCredit(initial int64) *credit {
	return &credit{bytes: initial, wake: make(chan struct{}, 1)}
}

func (cr *credit) grant(n int64) {
	cr.mu.Lock()
	cr.bytes += n
	cr.mu.Unlock()
	select {
	case cr.wake <- struct{}{}:
	default:
	}
}

// acquire waits until at least minBytes are granted, then takes up to maxBytes of them. It
// returns 0 when stop closes first.
func (cr *credit) acquire(minBytes, maxBytes int, stop <-chan struct{}) int {
	for {
		cr.mu.Lock()
		if cr.bytes >= int64(minBytes) {
			n := int(cr.bytes)
			if int64(maxBytes) < cr.bytes {
				n = maxBytes
			}
			cr.bytes -= int64(n)
			cr.mu.Unlock()
			return n
		}
		cr.mu.Unlock()
		select {
		case <-cr.wake:
		case <-stop:
			return 0
		}
	}
}

// giveBack returns credit taken by acquire but not spent.
func (cr *credit) giveBack(n int) {
	if n > 0 {
		cr.mu.Lock()
		cr.bytes += int64(n)
		cr.mu.Unlock()
	}
}

// outStream is the shared state of an agent→host stream (file.read, proc.attach): credit and a
// stop signal closed by END from the host, proc.detach, hello or the end of the connection.
type outStream struct {
	credit   *credit
	stopCh   chan struct{}
	stopOnce sync.Once
}

const defaultWindowBytes = 4 << 20

func newOutStream(windowBytes int64) *outStream {
	if windowBytes <= 0 {
		windowBytes = defaultWindowBytes
	}
	return &outStream{credit: newCredit(windowBytes), stopCh: make(chan struct{})}
}

func (s *outStream) data([]byte)     {}
func (s *outStream) window(n uint32) { s.credit.grant(int64(n)) }
func (s *outStream) end([]byte)      { s.stop() }
func (s *outStream) stop()           { s.stopOnce.Do(func() { close(s.stopCh) }) }

func decodeParams(raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return errorf("bad_request", "params: %v", err)
	}
	return nil
}
