module tranche.dev/ociregistry

go 1.26.8

require github.com/google/go-containerregistry v0.20.6
