// @sandglass/egress
