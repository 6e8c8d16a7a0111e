// Zero-copy file.read into the virtio port: the file's pages go through a pipe straight into the port's virtqueue,
// one descriptor chain per DATA frame instead of a copy into the agent and 32 KiB writes (docs/design/bulk-files.md).
package main

import (
	"errors"
	"io"
	"os"
	"syscall"
)

const (
	// splicePipeBytes is the pipe between the file and the port, and the largest spliced DATA payload: 64 pages, a
	// chain that fits the port's 128-entry virtqueue even without indirect descriptors.
	splicePipeBytes = 256 << 10
	fSetPipeSz      = 1031 // F_SETPIPE_SZ
	spliceFMove     = 1
	spliceFNonblock = 2
)

// spliceJob is one DATA frame whose payload waits in a pipe: the writer sends the header, then splices the payload.
type spliceJob struct {
	header []byte
	pipe   int // read end, holding exactly the payload
	n      int
	done   chan error
}

// splicePort returns the port's raw descriptor when w is a character device (the virtio port) that splice can feed;
// nil otherwise (a pipe or socket in tests), where file.read copies as before.
func splicePort(w io.Writer) syscall.RawConn {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// writeSpliced moves a job's payload from its pipe into the port, waiting for room when the port is full.
func writeSpliced(rc syscall.RawConn, j *spliceJob) error {
	remaining := j.n
	var spliceErr error
	err := rc.Write(func(fd uintptr) bool {
		for remaining > 0 {
			n, err := syscall.Splice(j.pipe, nil, int(fd), nil, remaining, spliceFMove|spliceFNonblock)
			switch {
			case errors.Is(err, syscall.EAGAIN):
				return false
			case errors.Is(err, syscall.EINTR):
				continue
			case err != nil:
				spliceErr = err
				return true
			case n == 0:
				spliceErr = io.ErrShortWrite
				return true
			}
			remaining -= int(n)
		}
		return true
	})
	if err != nil {
		return err
	}
	return spliceErr
}

// streamFileSpliced is streamFile for a connection on the virtio port. It returns false when splicing is not possible
// for this file (e.g. a FIFO or a file system without splice_read) before anything was sent, so the caller copies.
func streamFileSpliced(c *conn, id uint32, s *outStream, f *os.File) bool {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return false
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(p[1]), fSetPipeSz, splicePipeBytes); e != 0 {
		return false
	}
	src := int(f.Fd())
	sent := false
	for {
		n := s.credit.acquire(1, splicePipeBytes, s.stopCh)
		if n == 0 {
			return true // the host ended the stream or the connection went away
		}
		got := 0
		var readErr error
		for got < n {
			m, err := syscall.Splice(src, nil, p[1], nil, n-got, spliceFMove)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				readErr = err
				break
			}
			if m == 0 {
				readErr = io.EOF
				break
			}
			got += int(m)
		}
		if readErr != nil && readErr != io.EOF && !sent && got == 0 {
			s.credit.giveBack(n)
			return false // EINVAL: this file cannot be spliced; copy it instead
		}
		if got > 0 {
			j := &spliceJob{header: make([]byte, frameHeaderBytes), pipe: p[0], n: got, done: make(chan error, 1)}
			putFrameHeader(j.header, frameData, id, got)
			select {
			case c.bulk <- j:
			case <-c.done:
				return true
			}
			select {
			case err := <-j.done:
				if err != nil {
					return true // the writer failed: the connection is going away
				}
			case <-c.done:
				return true
			}
			sent = true
		}
		s.credit.giveBack(n - got)
		if readErr != nil {
			if c.removeStream(id, s) {
				if readErr == io.EOF {
					c.endStream(id, nil)
				} else {
					c.endStream(id, readErr)
				}
			}
			return true
		}
	}
}
