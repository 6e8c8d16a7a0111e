// @sandglass/chunkstore
