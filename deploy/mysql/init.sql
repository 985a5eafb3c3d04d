-- Runs once, when the mysql container initialises an empty data directory
-- (/docker-entrypoint-initdb.d). Passwords are set from the environment by
-- 20-passwords.sh, which runs next; until then both accounts are locked.

CREATE DATABASE IF NOT EXISTS shop CHARACTER SET utf8mb4;

CREATE TABLE shop.orders (
  id           BIGINT PRIMARY KEY AUTO_INCREMENT,
  customer     VARCHAR(64) NOT NULL,
  amount_cents BIGINT NOT NULL,
  status       VARCHAR(16) NOT NULL,
  created_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
);

-- The outbox table outboxd reads, as in docs/getting-started/preparing-the-database.md: internal/outboxtable.DDL (TestDocsCopies keeps this copy equal).
CREATE TABLE shop.outbox_event (
  id         BIGINT PRIMARY KEY AUTO_INCREMENT,
  event_id   VARCHAR(64)  NOT NULL,
  biz_key    VARCHAR(64)  NOT NULL,
  topic      VARCHAR(128) NOT NULL,
  event_type VARCHAR(64)  NULL,
  payload    JSON         NOT NULL,
  headers    JSON         NULL,
  created_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  UNIQUE KEY uk_event_id (event_id)
);

-- outboxd: least privileges. It reads the binlog as a replica (REPLICATION SLAVE), reads the
-- binlog position and GTID state (REPLICATION CLIENT), and may read the outbox table's columns
-- from information_schema (SELECT on that one table). Nothing else.
CREATE USER 'outboxd'@'%' ACCOUNT LOCK;
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'outboxd'@'%';
GRANT SELECT ON shop.outbox_event TO 'outboxd'@'%';

-- shopapp: writes orders and their outbox events, nothing more.
CREATE USER 'shopapp'@'%' ACCOUNT LOCK;
GRANT SELECT, INSERT ON shop.orders TO 'shopapp'@'%';
GRANT INSERT ON shop.outbox_event TO 'shopapp'@'%';
