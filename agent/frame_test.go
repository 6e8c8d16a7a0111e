// Tests for the frame codec.
package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(encodeFrame(frameCall, 7, []byte(`{"method":"ping"}`)))
	buf.Write(encodeFrame(frameEnd, 0xffffffff, nil))
	f, err := readFrame(&buf)
	if err != nil || f.typ != frameCall || f.channel != 7 || string(f.payload) != `{"method":"ping"}` {
		t.Fatalf("got %+v %v", f, err)
	}
	f, err = readFrame(&buf)
	if err != nil || f.typ != frameEnd || f.channel != 0xffffffff || len(f.payload) != 0 {
		t.Fatalf("got %+v %v", f, err)
	}
	if _, err = readFrame(&buf); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}

func TestFrameLengthCountsTypeAndChannel(t *testing.T) {
	b := encodeFrame(frameData, 1, []byte("abc"))
	if got := binary.BigEndian.Uint32(b); got != 8 {
		t.Fatalf("length %d, want 8", got)
	}
}

func TestFrameRejectsOversize(t *testing.T) {
	var hdr [9]byte
	binary.BigEndian.PutUint32(hdr[:], maxFrameLen+1)
	if _, err := readFrame(bytes.NewReader(hdr[:])); err == nil {
		t.Fatal("oversize frame accepted")
	}
	binary.BigEndian.PutUint32(hdr[:], 4)
	if _, err := readFrame(bytes.NewReader(hdr[:])); err == nil {
		t.Fatal("undersize frame accepted")
	}
}

func TestFrameTruncated(t *testing.T) {
	b := encodeFrame(frameData, 1, []byte("abcdef"))
	if _, err := readFrame(bytes.NewReader(b[:len(b)-2])); err != io.ErrUnexpectedEOF {
		t.Fatalf("want ErrUnexpectedEOF, got %v", err)
	}
}
