module sandglass/jailer

go 1.19
