module sandglass/agent

go 1.19
