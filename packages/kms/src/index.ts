// @sandglass/kms
