// Package version holds the version the binaries were built as.
package version

// Version is set at build time with -ldflags "-X .../internal/version.Version=...".
var Version = "dev"
