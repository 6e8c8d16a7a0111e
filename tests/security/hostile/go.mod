module sandglass/hostile

go 1.19
