#!/usr/bin/env bash
# netns.sh — test hosts on one machine: network namespaces joined by veth pairs to a bridge.
#
#   scripts/netns.sh up NAME N [--mgmt]   make hosts NAME-h0 … NAME-h(N-1)
#   scripts/netns.sh down NAME            remove them (their processes are killed first)
#   scripts/netns.sh check                exit 0 if namespaces can be made here, else say why
#
# Host i (from 0) has eth0 on bridge br0 of namespace NAME-hub, with 198.18.0.(i+1)/24 and
# fd00:18::(i+1)/64 (the benchmarking range 198.18.0.0/15 and IPv6 ULA fd00::/8, nothing else),
# and loopback. Its /etc/hosts (ip netns exec mounts /etc/netns/NAME-hi/hosts there) names every
# host: hI → 198.18.0.(I+1), hI-6 → fd00:18::(I+1). With --mgmt each host also gets, before
# eth0, an interface mgmt0 with 198.19.0.(i+1)/24 whose other end (mI in NAME-hub) is on no
# bridge: no peer is reachable there, so a node that announces the first address it finds
# announces one its peers cannot reach.
# Nothing is added to this machine's own namespace but the namespaces' names and files.
# Needs root and iproute2 (installed here if missing).
set -euo pipefail
. "$(dirname "$0")/need-debs.sh"

usage() { sed -n '2,6p' "$0" >&2; exit 2; }
say() { echo "netns.sh: $*" >&2; }

down() {
    local name=$1 ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name}-(hub|h[0-9]+)$" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
        rm -rf "/etc/netns/$ns"
    done
}

up() {
    local name=$1 n=$2 mgmt=${3:-} i ns
    [[ $name =~ ^[a-z][a-z0-9]{0,11}$ ]] || { say "NAME: 1-12 lowercase letters and digits"; exit 2; }
    [[ $n =~ ^[0-9]+$ ]] && (( n >= 1 && n <= 200 )) || { say "N: 1 to 200 hosts"; exit 2; }
    down "$name"
    trap 'rc=$?; down "$name"; exit $rc' ERR
    ip netns add "$name-hub"
    ip -n "$name-hub" link add br0 type bridge
    ip -n "$name-hub" link set br0 up
    ip -n "$name-hub" link set lo up
    local hosts="127.0.0.1 localhost
::1 localhost"
    for ((i = 0; i < n; i++)); do
        hosts+=$'\n'"198.18.0.$((i + 1)) h$i"$'\n'"fd00:18::$((i + 1)) h$i-6"
    done
    for ((i = 0; i < n; i++)); do
        ns=$name-h$i
        ip netns add "$ns"
        mkdir -p "/etc/netns/$ns"
        printf '%s\n' "$hosts" > "/etc/netns/$ns/hosts"
        ip -n "$ns" link set lo up
        if [[ $mgmt == --mgmt ]]; then
            ip -n "$name-hub" link add "m$i" type veth peer name mgmt0 netns "$ns"
            ip -n "$name-hub" link set "m$i" up
            ip -n "$ns" addr add "198.19.0.$((i + 1))/24" dev mgmt0
            ip -n "$ns" link set mgmt0 up
        fi
        ip -n "$name-hub" link add "v$i" type veth peer name eth0 netns "$ns"
        ip -n "$name-hub" link set "v$i" master br0 up
        ip -n "$ns" addr add "198.18.0.$((i + 1))/24" dev eth0
        # nodad: the address is usable at once (no duplicate detection on a private bridge).
        ip -n "$ns" -6 addr add "fd00:18::$((i + 1))/64" dev eth0 nodad
        ip -n "$ns" link set eth0 up
    done
    trap - ERR
}

case ${1:-} in
    up) [[ $# -ge 3 ]] || usage; need_debs iproute2; up "$2" "$3" "${4:-}" ;;
    down) [[ $# -eq 2 ]] || usage; down "$2" ;;
    check)
        [[ $(id -u) == 0 ]] || { echo "network namespaces need root (this is uid $(id -u))"; exit 1; }
        need_debs iproute2
        t=pschk$$
        if ! err=$(ip netns add "$t" 2>&1); then echo "ip netns add failed: $err"; exit 1; fi
        ip netns del "$t"
        ;;
    *) usage ;;
esac
