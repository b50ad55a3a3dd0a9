// Package supervisorimage tests the berth/supervisor container image that
// images/build.sh supervisor builds: it runs as a non-root user and serves
// /healthz.
package supervisorimage
