#!/usr/bin/env bash
# Installs the system packages outboxd's tests and demo need (Debian/Ubuntu), only when missing:
#   mariadb-server - the real source the integration tests start themselves;
#   prometheus     - promtool checks configs/prometheus (configs/configs_test.go), and
#                    e2e/prometheus_test.go runs the prometheus binary against outboxd.
#   dolt           - the MySQL-flavor source of e2e/dolt_test.go, built once into a cache by
#                    scripts/install-dolt.sh.
#   ca-certificates - the CA bundle the release image carries (internal/release's test and
#                    `make release` read /etc/ssl/certs/ca-certificates.crt).
#   systemd        - systemd-analyze verifies deploy/systemd/outboxd.service (deploy/systemd_test.go).
#   passwd         - useradd, for the unprivileged user that test starts outboxd as.
#   kcat           - the second read_committed reader (librdkafka) of the exactly-once tests
#                    (testenv/kafkaread, e2e/exactly_once_test.go).
#   tzdata         - /usr/share/zoneinfo: the sweep's DST cases load Europe/Berlin into MariaDB's
#                    time zone tables (e2e/sweep_test.go).
#   faketime       - libfaketime, preloaded into the mariadbd of the clock-skew tests to run the
#                    database's clock days off outboxd's (testenv/mariadb FakeClock,
#                    e2e/clockskew_test.go); Go reads the clock through the vDSO, so only the C
#                    server can be faked.
# Nothing is started here: the tests run their own servers, in temp dirs on free ports.
# --demo installs only what `make demo` needs: mariadb-server.
set -euo pipefail
# shellcheck source=scripts/apt.sh
. "$(dirname "$0")/apt.sh"

demo=false
[ "${1:-}" = "--demo" ] && demo=true

$demo || "$(dirname "$0")/install-dolt.sh"

need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
if ! $demo && { ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; }; then
	need+=(prometheus)
fi
$demo || [ -s /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
if ! $demo; then
	command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
	command -v useradd >/dev/null 2>&1 || [ -x /usr/sbin/useradd ] || need+=(passwd)
	command -v kcat >/dev/null 2>&1 || need+=(kcat)
	compgen -G '/usr/lib/*/faketime/libfaketimeMT.so.1' >/dev/null || need+=(faketime)
	[ -e /usr/share/zoneinfo/Europe/Berlin ] || need+=(tzdata)
fi
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A policy-rc.d that refuses every start keeps the packages' services (mariadb, prometheus on
# :9090) from starting during the install; one that exists already (as in Docker images) is
# left alone.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	trap '$sudo rm -f "$policy"' EXIT
	printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
	$sudo chmod 755 "$policy"
fi
apt_get update -qq
# --no-install-recommends: prometheus recommends prometheus-node-exporter, which nothing here uses.
apt_get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Only the binaries of prometheus are wanted: a system prometheus on :9090 would also take the
# port docker-compose.yml publishes for its own, so it is not left enabled for the next boot.
if [[ " ${need[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
	$sudo systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
