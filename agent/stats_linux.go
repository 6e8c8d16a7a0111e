// sys.stats: the guest's CPU ticks, memory and root filesystem use, which the host samples into a sandbox's metrics.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// cpuTicks sums the first /proc/stat line: every tick since boot, and those idle or waiting on I/O.
func cpuTicks(stat []byte) (total, idle uint64, ok bool) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		// guest and guest_nice (fields 9 and 10) are already counted in user and nice.
		if i >= 8 {
			break
		}
		total += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return total, idle, true
}

// memInfo reads the kilobyte fields of /proc/meminfo the metrics need, in bytes.
func memInfo(meminfo []byte) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		name, rest, found := strings.Cut(sc.Text(), ":")
		if !found {
			continue
		}
		switch name {
		case "MemTotal", "MemAvailable", "Cached":
			f := strings.Fields(rest)
			if len(f) > 0 {
				if n, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					out[name] = n * 1024
				}
			}
		}
	}
	return out
}

func sysStats(c *conn, raw json.RawMessage) (any, func(), error) {
	out := map[string]any{"cpuCount": runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		if total, idle, ok := cpuTicks(b); ok {
			out["cpuTotalTicks"], out["cpuIdleTicks"] = total, idle
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m := memInfo(b)
		if t, ok := m["MemTotal"]; ok {
			out["memTotalBytes"] = t
			if a, ok := m["MemAvailable"]; ok && a <= t {
				out["memUsedBytes"] = t - a
			}
		}
		if v, ok := m["Cached"]; ok {
			out["memCacheBytes"] = v
		}
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/", &fs); err == nil {
		bs := uint64(fs.Bsize)
		out["diskTotalBytes"] = fs.Blocks * bs
		out["diskUsedBytes"] = (fs.Blocks - fs.Bfree) * bs
	}
	return out, nil, nil
}
