#!/usr/bin/env bash
# Installs the system packages outboxd's tests and demo need (Debian/Ubuntu), only when missing.
# MariaDB is the real source the tests start themselves; nothing is started here.
set -euo pipefail

need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
for pkg in "${@}"; do
	case "$pkg" in
	prometheus) command -v prometheus >/dev/null 2>&1 || need+=(prometheus) ;;
	esac
done
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# policy-rc.d keeps Debian from starting the packaged services: the tests start their own.
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The package may have started a system mariadbd; outboxd's harness uses its own datadir and port.
