// A deliberately hostile program for tests/security/jailer.test.ts: each subcommand is one thing a VM that escaped
// QEMU would try. Exit 0: it worked; exit 1: it was refused (the reason on stderr).
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: hostile connect|unix|read|list|write|alloc|signal ARG")
		os.Exit(2)
	}
	arg := os.Args[2]
	var err error
	switch os.Args[1] {
	case "connect":
		var c net.Conn
		if c, err = net.DialTimeout("tcp", arg, 2*time.Second); err == nil {
			c.Close()
		}
	case "unix":
		var c net.Conn
		if c, err = net.DialTimeout("unix", arg, 2*time.Second); err == nil {
			c.Close()
		}
	case "read":
		var f *os.File
		if f, err = os.Open(arg); err == nil {
			_, err = f.Read(make([]byte, 1))
			f.Close()
		}
	case "list":
		_, err = os.ReadDir(arg)
	case "write":
		// Opened for writing, never written: the control run must not damage what it proves it could.
		var f *os.File
		if f, err = os.OpenFile(arg, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
	case "alloc":
		mib, _ := strconv.Atoi(arg)
		b := make([]byte, mib<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println(len(b) >> 20)
	case "signal":
		pid, _ := strconv.Atoi(arg)
		err = syscall.Kill(pid, 0)
	default:
		err = fmt.Errorf("unknown subcommand %s", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
