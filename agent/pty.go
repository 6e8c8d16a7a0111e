// Pseudo-terminals for proc.start with `pty`: /dev/ptmx, unlock, find the slave, window size.
package main

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// openPty returns a pollable master and a blocking slave (the slave is only handed to a child).
func openPty() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var n uint32
	err = ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&n)) // n = 0: unlock
	if err == nil {
		err = ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n))
	}
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

func setWinsize(master *os.File, cols, rows int) error {
	if cols <= 0 || rows <= 0 || cols > 0xffff || rows > 0xffff {
		return errorf("bad_request", "cols and rows must be between 1 and 65535")
	}
	ws := struct{ row, col, xpixel, ypixel uint16 }{row: uint16(rows), col: uint16(cols)}
	return ioctl(master, syscall.TIOCSWINSZ, unsafe.Pointer(&ws))
}

// ioctl goes through SyscallConn because File.Fd would switch the master to blocking mode,
// after which Close could no longer interrupt a pending Read.
func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
