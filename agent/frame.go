// Frame codec of the agent protocol: u32 length, u8 type, u32 channel, payload (spec/agent-protocol.md).
package main

import (
	"encoding/binary"
	"fmt"
	"io"
)

const (
	frameCall   = 1
	frameReply  = 2
	frameEvent  = 3
	frameData   = 4
	frameEnd    = 5
	frameWindow = 6

	// frameHeaderBytes is the length prefix plus type and channel.
	frameHeaderBytes = 9
	// maxFrameLen bounds `length` (type + channel + payload) so a corrupt or hostile peer cannot
	// make us allocate unbounded memory.
	maxFrameLen = 1<<20 + 5
	// maxDataBytes is the largest DATA payload the agent sends: small enough that a DATA frame
	// never holds the single writer for long, large enough to amortise framing.
	maxDataBytes = 256 << 10
)

type frame struct {
	typ     byte
	channel uint32
	payload []byte
}

// readFrame reads one frame; the payload is freshly allocated, so callers may keep it.
func readFrame(r io.Reader) (frame, error) {
	var hdr [frameHeaderBytes]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	length := binary.BigEndian.Uint32(hdr[0:4])
	if length < 5 || length > maxFrameLen {
		return frame{}, fmt.Errorf("bad frame length %d", length)
	}
	f := frame{typ: hdr[4], channel: binary.BigEndian.Uint32(hdr[5:9])}
	f.payload = make([]byte, length-5)
	if _, err := io.ReadFull(r, f.payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	return f, nil
}

// newFrame allocates a frame with room for payloadBytes and fills in the header, so producers
// can read file or ring data straight into the frame instead of copying it twice.
func newFrame(typ byte, channel uint32, payloadBytes int) []byte {
	b := make([]byte, frameHeaderBytes+payloadBytes)
	putHeader(b, typ, channel)
	return b
}

// putHeader writes the header for the frame occupying all of b.
func putHeader(b []byte, typ byte, channel uint32) {
	binary.BigEndian.PutUint32(b[0:4], uint32(len(b)-4))
	b[4] = typ
	binary.BigEndian.PutUint32(b[5:9], channel)
}

// putFrameHeader writes the header of a frame with payloadBytes of payload into b[:frameHeaderBytes].
func putFrameHeader(b []byte, typ byte, channel uint32, payloadBytes int) {
	binary.BigEndian.PutUint32(b[0:4], uint32(payloadBytes+5))
	b[4] = typ
	binary.BigEndian.PutUint32(b[5:9], channel)
}

func encodeFrame(typ byte, channel uint32, payload []byte) []byte {
	b := newFrame(typ, channel, len(payload))
	copy(b[frameHeaderBytes:], payload)
	return b
}
