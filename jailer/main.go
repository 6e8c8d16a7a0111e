// sandglass-jailer starts one program (QEMU, or in tests any program) confined the way a Sandglass VM is: its own
// uid and gid, its cgroup joined before the program exists, new mount, network, IPC, UTS and PID namespaces, a
// tmpfs root holding only the host paths it was given (at the same absolute paths), no_new_privs, rlimits and no
// inherited descriptors but the ones named.
//
// Stage 1 (as root, in the gateway's namespaces) validates the arguments, joins the cgroup, and re-executes itself
// as stage 2 in new namespaces: Go cannot run code between clone and exec, and unshare(CLONE_NEWNS) fails in a
// multithreaded process, so the namespaces come from the clone flags of that re-execution. Stage 1 then stays as
// the program's parent: it forwards signals, records the VM (pid, start time, owner instance) for a later gateway,
// and exits the way the program did.
package main

import (
	"fmt"
	"os"
)

// stageEnv marks the re-executed jailer; it is the only variable stage 2 receives.
const stageEnv = "SANDGLASS_JAILER_STAGE"

func main() {
	cfg, err := ParseArgs(os.Args[1:])
	if err != nil {
		fail("%v", err)
	}
	if os.Getenv(stageEnv) == "2" {
		stage2(cfg)
		return
	}
	os.Exit(stage1(cfg))
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "sandglass-jailer: "+format+"\n", args...)
	os.Exit(125)
}
