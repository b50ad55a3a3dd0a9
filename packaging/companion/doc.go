// Package companion holds the downloads of the companion app (the lender's
// desktop app, cmd/berth-companion) and their tests: the Debian package
// (nfpm.yaml, the desktop entry and icon, built by build.sh deb), installed
// and started in a clean container, and the Windows .exe (build.sh windows,
// cross-built with Debian's mingw-w64 toolchain), whose PE headers and
// imports are checked.
package companion
