// Inbound port access: the host asks the agent to open a guest loopback port and relays the connection as a stream.
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// dialTimeout bounds a connect to guest loopback: it either completes or is refused at once, unless the guest's
// accept queue is full (the kernel then drops the SYN and the connect waits on its retries). A variable so a test can
// shorten it.
var dialTimeout = 5 * time.Second

// netDial connects to a guest loopback port for the host. Only loopback: the host reaches what the guest serves,
// and nothing here lets a guest program make the agent or the host connect anywhere else.
func netDial(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		StreamID uint32 `json:"streamId"`
		Port     int    `json:"port"`
		Address  string `json:"address"`
		Window   int64  `json:"window"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if p.StreamID == 0 || p.StreamID&agentStreamBit != 0 {
		return nil, nil, errorf("bad_request", "streamId must be between 1 and 2^31-1")
	}
	if p.Port < 1 || p.Port > 65535 {
		return nil, nil, errorf("bad_request", "port must be an integer from 1 to 65535")
	}
	addrs := []string{"127.0.0.1", "::1"}
	switch p.Address {
	case "":
	case "127.0.0.1", "::1":
		addrs = []string{p.Address}
	default:
		return nil, nil, errorf("bad_request", "address must be 127.0.0.1 or ::1, got %q", p.Address)
	}
	if p.Window < 0 || p.Window > 64<<20 {
		return nil, nil, errorf("bad_request", "window must be between 1 and %d bytes", 64<<20)
	}
	if p.Window == 0 {
		p.Window = defaultWindowBytes
	}
	a := c.a
	a.netMu.Lock()
	relayPort := 0
	if a.listener != nil {
		relayPort = a.listener.port
	}
	a.netMu.Unlock()
	if p.Port == relayPort {
		// The egress relay's listener would hand the host's own connection back to it as a guest connection.
		return nil, nil, errorf("permission_denied", "port %d is the agent's egress relay", p.Port)
	}
	sock, err := dialLoopback(addrs, p.Port)
	if err != nil {
		return nil, nil, err
	}
	r := &relay{a: a, c: c, sock: sock, stopCh: make(chan struct{}), credit: newCredit(p.Window)}
	r.cond = sync.NewCond(&r.mu)
	r.id = p.StreamID
	if err := c.addStream(p.StreamID, r); err != nil {
		sock.Close()
		return nil, nil, err
	}
	return map[string]any{"recvWindow": relayRecvWindow, "peer": sock.RemoteAddr().String()}, func() {
		go r.pumpOut()
		go r.pumpIn()
	}, nil
}

// dialLoopback tries each loopback address in turn: dev servers bind 127.0.0.1, ::1 ("localhost") or both. Nothing
// listens only when every address refused: a connect that timed out on one is a server whose accept queue stayed full
// (a small listen backlog under load), and the other's refusal must not report that port as closed.
func dialLoopback(addrs []string, port int) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	var failed error
	for _, host := range addrs {
		nc, err := d.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return nc.(*net.TCPConn), nil
		}
		if failed == nil && !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			failed = err
		}
	}
	var ne net.Error
	switch {
	case failed == nil:
		return nil, errorf("not_found", "nothing listens on guest port %d", port)
	case errors.As(failed, &ne) && ne.Timeout():
		return nil, errorf("timeout", "guest port %d accepted no connection within %s: its server's accept queue is full", port, dialTimeout)
	default:
		return nil, errorf("io", "connect to guest port %d: %v", port, failed)
	}
}

// listeningPort is one TCP socket in LISTEN state in the guest.
type listeningPort struct {
	Port    int    `json:"port"`
	Address string `json:"address"`
}

// netPorts lists the guest's listening TCP sockets from /proc/net/tcp{,6}, leaving out the agent's egress relay.
func netPorts(c *conn, _ json.RawMessage) (any, func(), error) {
	c.a.netMu.Lock()
	relayPort := -1
	if c.a.listener != nil {
		relayPort = c.a.listener.port
	}
	c.a.netMu.Unlock()
	seen := map[listeningPort]bool{}
	ports := []listeningPort{}
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		found, err := readListening(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, mapErr(err)
		}
		for _, lp := range found {
			if lp.Port != relayPort && !seen[lp] {
				seen[lp] = true
				ports = append(ports, lp)
			}
		}
	}
	sort.Slice(ports, func(i, j int) bool {
		if ports[i].Port != ports[j].Port {
			return ports[i].Port < ports[j].Port
		}
		return ports[i].Address < ports[j].Address
	})
	return map[string]any{"ports": ports}, nil, nil
}

// tcpListen is the state column's value for LISTEN in /proc/net/tcp.
const tcpListen = "0A"

func readListening(path string) ([]listeningPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []listeningPort
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != tcpListen {
			continue
		}
		if lp, ok := parseProcAddr(fields[1]); ok {
			out = append(out, lp)
		}
	}
	return out, sc.Err()
}

// parseProcAddr decodes "0100007F:1F90": the address as the kernel's 32-bit words in host (little-endian) order.
func parseProcAddr(s string) (listeningPort, bool) {
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		return listeningPort{}, false
	}
	pn, err := strconv.ParseUint(port, 16, 16)
	raw, err2 := hex.DecodeString(host)
	if err != nil || err2 != nil || (len(raw) != 4 && len(raw) != 16) {
		return listeningPort{}, false
	}
	ip := make(net.IP, len(raw))
	for w := 0; w < len(raw); w += 4 {
		for b := 0; b < 4; b++ {
			ip[w+b] = raw[w+3-b]
		}
	}
	return listeningPort{Port: int(pn), Address: ip.String()}, true
}
