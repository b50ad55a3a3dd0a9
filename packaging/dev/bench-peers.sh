#!/bin/sh
# bench-peers.sh installs the forward proxies that the egress benchmarks
# compare Berth's egress proxy with: Debian's squid and tinyproxy. Their
# packages would start system services on install; the benchmarks run
# their own instances on loopback instead, so none is started here
# (policy-rc.d refuses every start during the install) and any that a
# package did start is not touched.
set -eu
missing=""
command -v squid >/dev/null 2>&1 || missing="$missing squid"
command -v tinyproxy >/dev/null 2>&1 || missing="$missing tinyproxy"
command -v curl >/dev/null 2>&1 || missing="$missing curl"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "bench-peers: the egress benchmarks need:$missing (apt-get install$missing as root)" >&2
	exit 1
fi
policy=/usr/sbin/policy-rc.d
ours=""
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	ours=1
fi
trap '[ -n "$ours" ] && rm -f "$policy"' EXIT
echo "bench-peers: installing$missing" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
