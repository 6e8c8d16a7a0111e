// Tests for the output ring's offsets and bounds.
package main

import (
	"bytes"
	"testing"
)

// readAll collects everything from offset `from`, checking that offsets are contiguous.
func readAll(t *testing.T, r *ring, from uint64) (out map[byte][]byte, first uint64) {
	out = map[byte][]byte{}
	first = from
	for i := 0; ; i++ {
		fd, off, b := r.read(from, 5)
		if i == 0 {
			first = off
		} else if off != from {
			t.Fatalf("gap: asked %d got %d", from, off)
		}
		if len(b) == 0 {
			return out, first
		}
		out[fd] = append(out[fd], b...)
		from = off + uint64(len(b))
	}
}

func TestRingInterleaves(t *testing.T) {
	r := newRing(1 << 20)
	r.write(1, []byte("hello "))
	r.write(2, []byte("oops "))
	r.write(1, []byte("world"))
	if r.start != 0 || r.end != 16 {
		t.Fatalf("start %d end %d", r.start, r.end)
	}
	out, _ := readAll(t, r, 0)
	if string(out[1]) != "hello world" || string(out[2]) != "oops " {
		t.Fatalf("got %q", out)
	}
	fd, off, b := r.read(8, 100)
	if fd != 2 || off != 8 || string(b) != "ps " {
		t.Fatalf("middle read: %d %d %q", fd, off, b)
	}
}

func TestRingDropsOldest(t *testing.T) {
	r := newRing(10)
	r.write(1, []byte("0123456789"))
	r.write(2, []byte("abcd"))
	if r.start != 4 || r.end != 14 || r.size != 10 {
		t.Fatalf("start %d end %d size %d", r.start, r.end, r.size)
	}
	out, first := readAll(t, r, 0)
	if first != 4 || string(out[1]) != "456789" || string(out[2]) != "abcd" {
		t.Fatalf("first %d out %q", first, out)
	}
}

func TestRingHugeWriteKeepsTail(t *testing.T) {
	r := newRing(4)
	r.write(1, []byte("ab"))
	r.write(1, []byte("0123456789"))
	if r.start != 8 || r.end != 12 {
		t.Fatalf("start %d end %d", r.start, r.end)
	}
	out, _ := readAll(t, r, 0)
	if string(out[1]) != "6789" {
		t.Fatalf("got %q", out[1])
	}
}

func TestRingSlicesStayValid(t *testing.T) {
	r := newRing(1 << 20)
	r.write(1, []byte("abc"))
	_, _, b := r.read(0, 10)
	r.write(1, bytes.Repeat([]byte("x"), 10000))
	if string(b) != "abc" {
		t.Fatalf("slice changed: %q", b)
	}
	if _, off, b := r.read(r.end, 10); len(b) != 0 || off != r.end {
		t.Fatal("read at end returned bytes")
	}
}
