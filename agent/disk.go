// disk.grow: the root filesystem grows online to fill a root disk the host made larger.
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

const (
	ioctlExt4ResizeFs = 0x40086610 // EXT4_IOC_RESIZE_FS: _IOW('f', 16, __u64), the new block count
	// How long the kernel may take to notice the host's resize (a virtio config-change interrupt, handled on a workqueue).
	diskGrowWait = 10 * time.Second
)

// diskGrow waits until the kernel sees the root block device at least `bytes` long, then grows the root ext4
// filesystem to the device's size in whole blocks. Growing to the size it already has is a no-op; the kernel refuses
// to shrink.
func diskGrow(c *conn, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Bytes uint64 `json:"bytes"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if p.Bytes == 0 {
		return nil, nil, errorf("bad_request", "bytes must be positive")
	}
	dev, err := mountSource("/")
	if err != nil {
		return nil, nil, errorf("io", "finding the root device: %v", err)
	}
	sizeFile := filepath.Join("/sys/class/block", filepath.Base(dev), "size")
	deadline := time.Now().Add(diskGrowWait)
	var devBytes uint64
	for {
		devBytes, err = blockDeviceBytes(sizeFile)
		if err != nil {
			return nil, nil, errorf("io", "reading %s: %v", sizeFile, err)
		}
		if devBytes >= p.Bytes {
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, errorf("io", "%s is %d bytes after %s, not the %d asked", dev, devBytes, diskGrowWait, p.Bytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs("/", &st); err != nil {
		return nil, nil, errorf("io", "statfs /: %v", err)
	}
	blocks := devBytes / uint64(st.Bsize)
	root, err := os.Open("/")
	if err != nil {
		return nil, nil, errorf("io", "open /: %v", err)
	}
	defer root.Close()
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, root.Fd(), ioctlExt4ResizeFs, uintptr(unsafe.Pointer(&blocks))); errno != 0 {
		return nil, nil, errorf("io", "growing the root filesystem to %d blocks: %v", blocks, errno)
	}
	return map[string]any{"bytes": blocks * uint64(st.Bsize)}, nil, nil
}

// mountSource is the device mounted at `target` (the last such mount: it hides the ones under it).
func mountSource(target string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	source := ""
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(s.Text())
		if len(fields) < 5 || fields[4] != target {
			continue
		}
		for i := 5; i+2 < len(fields); i++ {
			if fields[i] == "-" {
				source = fields[i+2]
				break
			}
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	if !strings.HasPrefix(source, "/dev/") {
		return "", errorf("io", "%s is not mounted from a device (%q)", target, source)
	}
	return source, nil
}

// blockDeviceBytes reads a /sys/class/block/*/size file (512-byte sectors whatever the device's block size).
func blockDeviceBytes(sizeFile string) (uint64, error) {
	b, err := os.ReadFile(sizeFile)
	if err != nil {
		return 0, err
	}
	sectors, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return sectors * 512, err
}
