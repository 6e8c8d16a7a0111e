// Tests of sys.stats' parsers: /proc/stat's CPU line and /proc/meminfo's fields.
package main

import "testing"

func TestCPUTicksSumsTheFirstEightFields(t *testing.T) {
	total, idle, ok := cpuTicks([]byte("cpu  10 1 5 100 4 0 2 0 7 7\ncpu0 10 1 5 100 4 0 2 0 7 7\n"))
	if !ok || total != 122 || idle != 104 {
		t.Fatalf("got %d %d %v", total, idle, ok)
	}
	if _, _, ok := cpuTicks([]byte("intr 1 2 3\n")); ok {
		t.Fatal("a line that is not cpu accepted")
	}
}

func TestMemInfoInBytes(t *testing.T) {
	m := memInfo([]byte("MemTotal:        1000 kB\nMemFree: 10 kB\nMemAvailable:     400 kB\nCached:  50 kB\nSwapCached: 9 kB\n"))
	if m["MemTotal"] != 1024000 || m["MemAvailable"] != 409600 || m["Cached"] != 51200 || len(m) != 3 {
		t.Fatalf("got %v", m)
	}
}
