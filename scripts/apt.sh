# Sourced by the install scripts: apt_get runs apt-get (through sudo unless root) so that it
# waits for apt's lock instead of failing at once when another package manager holds it, as
# unattended-upgrades does for minutes after a cloud VM boots. Before it waits it says who
# holds the lock, so a silent pause is not taken for a hang.
#   OUTBOXD_APT_LOCK_TIMEOUT  seconds to wait for the lock (default 600)
#   OUTBOXD_APT_LOCKS         the lock files to name a holder of (default: apt's and dpkg's)

apt_lock_timeout="${OUTBOXD_APT_LOCK_TIMEOUT:-600}"

# apt_lock_holder prints "PID (COMMAND)" of a process holding one of apt's locks, and nothing
# when none does (or when /proc/locks cannot tell: the wait itself still works).
apt_lock_holder() {
	local f ino pid
	for f in ${OUTBOXD_APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}; do
		[ -e "$f" ] || continue
		ino="$(stat -c %i "$f" 2>/dev/null)" || continue
		# /proc/locks: "1: POSIX  ADVISORY  WRITE PID MAJ:MIN:INODE START END"
		pid="$(awk -v ino="$ino" '{ n = split($6, d, ":"); if (n == 3 && d[3] == ino && $5 > 0) { print $5; exit } }' /proc/locks 2>/dev/null)"
		if [ -n "$pid" ]; then
			echo "$pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo unknown))"
			return
		fi
	done
}

apt_get() {
	local sudo="" holder
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	holder="$(apt_lock_holder)"
	if [ -n "$holder" ]; then
		echo "apt-get $1: apt's lock is held by process $holder, probably unattended-upgrades on a fresh machine; waiting up to ${apt_lock_timeout}s for it to finish" >&2
	fi
	$sudo apt-get -o "DPkg::Lock::Timeout=${apt_lock_timeout}" "$@"
}
