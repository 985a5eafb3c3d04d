# Sourced (not executed: keep this file non-executable) by the mysql image's entrypoint after
# init.sql, while the init-time server runs; docker_process_sql comes from that entrypoint.
# Sets the passwords of the accounts init.sql created locked, from the container environment,
# so no password is written in a file of the repository.

outboxd_sql_string() {
	# A MySQL string literal: double the backslashes, then escape the single quotes.
	local s=${1//\\/\\\\}
	s=${s//\'/\\\'}
	printf "'%s'" "$s"
}

if [ -z "${OUTBOXD_MYSQL_PASSWORD:-}" ] || [ -z "${SHOP_MYSQL_PASSWORD:-}" ]; then
	echo >&2 "20-passwords.sh: OUTBOXD_MYSQL_PASSWORD and SHOP_MYSQL_PASSWORD must be set"
	exit 1
fi

docker_process_sql <<SQL
ALTER USER 'outboxd'@'%' IDENTIFIED BY $(outboxd_sql_string "$OUTBOXD_MYSQL_PASSWORD") ACCOUNT UNLOCK;
ALTER USER 'shopapp'@'%' IDENTIFIED BY $(outboxd_sql_string "$SHOP_MYSQL_PASSWORD") ACCOUNT UNLOCK;
SQL
