# need-debs.sh — sourced by the repository's scripts (never run on its own):
#
#   . scripts/need-debs.sh; need_debs PKG...
#
# Makes sure each Debian package PKG is installed, asking dpkg itself (`dpkg-query -W`), never
# looking for a file that some other package might also ship. As root, the missing ones are
# installed with apt-get (the package lists are refreshed once if the first try fails, as on a
# fresh machine whose lists are old or empty) and asked for again afterwards. As another user it
# names them and the command that installs them, and exits 1 (or $NEED_DEBS_STATUS when set).
need_debs_missing() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
    done
}

need_debs() {
    local me missing
    me=$(basename "$0")
    mapfile -t missing < <(need_debs_missing "$@")
    (( ${#missing[@]} )) || return 0
    if [[ $(id -u) != 0 ]]; then
        echo "$me: missing Debian packages: ${missing[*]} (as root: apt-get install ${missing[*]})" >&2
        exit "${NEED_DEBS_STATUS:-1}"
    fi
    echo "$me: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
        || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; } \
        || { echo "$me: cannot install ${missing[*]}" >&2; exit "${NEED_DEBS_STATUS:-1}"; }
    mapfile -t missing < <(need_debs_missing "${missing[@]}")
    if (( ${#missing[@]} )); then
        echo "$me: apt-get succeeded but dpkg still lacks ${missing[*]}" >&2
        exit "${NEED_DEBS_STATUS:-1}"
    fi
}
