// Package deb holds the berth Debian package (nfpm.yaml, the systemd
// units, /etc/berth/*.env and the maintainer scripts, built by build.sh)
// and its test: install, upgrade and purge in a clean Debian container.
package deb
