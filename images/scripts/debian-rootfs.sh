#!/usr/bin/env bash
# debian-rootfs.sh makes a trimmed Debian root filesystem for the Berth base
# image: debootstrap's minbase variant, without documentation, manual pages,
# translations or apt lists, and configured so that later package installs
# stay small and never start services.
#
# Usage: debian-rootfs.sh DIR SUITE MIRROR [SECURITY_MIRROR]
#
# DIR must not exist yet or be empty. Needs root (debootstrap chroots into
# DIR). The result is meant for `tar -C DIR -c . | docker import - NAME`.
set -euo pipefail

if [ "$#" -lt 3 ] || [ "$#" -gt 4 ]; then
	echo "usage: $0 DIR SUITE MIRROR [SECURITY_MIRROR]" >&2
	exit 2
fi
dir=$1 suite=$2 mirror=$3 security=${4:-}

if [ "$(id -u)" != 0 ]; then
	echo "debian-rootfs.sh: debootstrap needs root" >&2
	exit 1
fi
if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
	echo "debian-rootfs.sh: $dir is not empty" >&2
	exit 1
fi
mkdir -p "$dir"

debootstrap --variant=minbase --force-check-gpg "$suite" "$dir" "$mirror"

# debootstrap normally unmounts what it mounted; make sure before trimming.
awk -v d="$(cd "$dir" && pwd -P)/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts |
	sort -r | while read -r m; do umount -l "$m"; done

cd "$dir"

# Package sources: the release and its updates from the mirror, plus the
# security archive when one is known.
rm -f etc/apt/sources.list
{
	printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
		"$mirror" "$suite" "$suite"
	if [ -n "$security" ]; then
		printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
			"$security" "$suite"
	fi
} >etc/apt/sources.list.d/debian.sources

# apt: no recommends or suggests, no translations, no package caches kept.
cat >etc/apt/apt.conf.d/90berth <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
EOF

# dpkg: leave out documentation, manual pages and translations from every
# package installed later (copyright files are kept).
cat >etc/dpkg/dpkg.cfg.d/90berth-nodoc <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/groff/*
path-exclude=/usr/share/lintian/*
path-exclude=/usr/share/linda/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
EOF
cat >etc/dpkg/dpkg.cfg.d/90berth-unsafe-io <<'EOF'
force-unsafe-io
EOF

# Never start services while packages are installed in an image build.
cat >usr/sbin/policy-rc.d <<'EOF'
#!/bin/sh
exit 101
EOF
chmod 0755 usr/sbin/policy-rc.d

# Trim what is already installed.
find usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
find usr/share/doc -mindepth 1 -type d -empty -delete
rm -rf usr/share/man/* usr/share/info/* usr/share/groff/* usr/share/lintian/* usr/share/linda/*
find usr/share/locale -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
rm -rf var/lib/apt/lists/* var/cache/apt/* var/cache/debconf/*-old var/lib/dpkg/*-old
find var/log -type f -delete

# Host-specific files debootstrap copied in; the container engine provides its own.
rm -f etc/hostname etc/resolv.conf etc/hosts
if [ -e etc/machine-id ]; then : >etc/machine-id; fi
