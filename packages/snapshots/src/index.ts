// @sandglass/snapshots
