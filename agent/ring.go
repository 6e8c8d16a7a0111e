// Per-process output ring: stdout and stderr in one offset space, bounded, oldest bytes dropped first.
package main

import "sort"

// segmentCoalesceBytes caps how large a segment grows by appending: small reads of one fd are
// merged so DATA frames are not tiny, while dropping the oldest segment frees memory in
// reasonably small steps.
const segmentCoalesceBytes = 64 << 10

type segment struct {
	fd  byte
	off uint64
	b   []byte
}

// ring keeps the newest maxBytes of a process's output. Bytes inside a segment are never
// modified once written, so slices returned by read stay valid after later writes and trims.
type ring struct {
	maxBytes int
	segs     []segment
	size     int
	start    uint64 // offset of the oldest retained byte
	end      uint64 // offset just past the newest byte: the total output ever written
}

func newRing(maxBytes int) *ring { return &ring{maxBytes: maxBytes} }

func (r *ring) write(fd byte, p []byte) {
	if len(p) == 0 {
		return
	}
	if len(p) > r.maxBytes {
		// Only the tail can survive; account for the skipped bytes without storing them.
		skip := len(p) - r.maxBytes
		r.end += uint64(skip)
		p = p[skip:]
		r.segs, r.size = nil, 0
	}
	if n := len(r.segs); n > 0 && r.segs[n-1].fd == fd && len(r.segs[n-1].b) < segmentCoalesceBytes {
		r.segs[n-1].b = append(r.segs[n-1].b, p...)
	} else {
		b := make([]byte, len(p), max(len(p), 4<<10))
		copy(b, p)
		r.segs = append(r.segs, segment{fd: fd, off: r.end, b: b})
	}
	r.size += len(p)
	r.end += uint64(len(p))
	for r.size > r.maxBytes {
		excess := r.size - r.maxBytes
		first := &r.segs[0]
		if len(first.b) <= excess {
			r.size -= len(first.b)
			r.segs[0] = segment{}
			r.segs = r.segs[1:]
			continue
		}
		first.b = first.b[excess:]
		first.off += uint64(excess)
		r.size -= excess
	}
	if len(r.segs) > 0 {
		r.start = r.segs[0].off
	} else {
		r.start = r.end
	}
}

// read returns up to maxBytes of one fd's output starting at from (moved up to start when those
// bytes were dropped). It returns no bytes when from is at or past end.
func (r *ring) read(from uint64, maxBytes int) (fd byte, off uint64, b []byte) {
	if from < r.start {
		from = r.start
	}
	if from >= r.end || maxBytes <= 0 {
		return 0, from, nil
	}
	i := sort.Search(len(r.segs), func(i int) bool {
		s := r.segs[i]
		return s.off+uint64(len(s.b)) > from
	})
	s := r.segs[i]
	b = s.b[from-s.off:]
	if len(b) > maxBytes {
		b = b[:maxBytes]
	}
	return s.fd, from, b
}

func max(a, b int) int {
	if a > b {
		return a
	}
	return b
}
