-- The consumer kit's tables (github.com/outboxd/outboxd/consumer), MySQL 5.7+/MariaDB 10.3+,
-- InnoDB. Create them in the database that holds the business tables: the mark must commit in
-- the same transaction as the work. Kit.CreateTables runs this with the configured names.

-- Both tables are utf8mb4 whatever the database's default (latin1 on MySQL 5.7 and on MariaDB
-- before 11.6), so that no text a message or an error holds can make an insert fail.

-- One row per event handled by a handler: the primary key is what makes a redelivery a
-- duplicate. handler (Options.Handler) is part of it, so that handlers sharing the table each
-- handle every event once instead of taking each other's marks for duplicates. handler and
-- event_id are VARBINARY so that they compare byte for byte: under a case-insensitive
-- collation "A1" and "a1" would be one event.
-- A table of the kit before handler was part of the key (PRIMARY KEY (event_id)) is refused with
-- the ALTER TABLE that migrates it (Kit.MigrationSQL, README "The tables").
CREATE TABLE IF NOT EXISTS `consumed_event` (
  handler    VARBINARY(64)  NOT NULL,
  event_id   VARBINARY(255) NOT NULL,
  status     ENUM('PROCESSED', 'REJECTED') NOT NULL,
  msg_id     VARCHAR(512) NULL,
  handled_at DATETIME(6)  NOT NULL,
  PRIMARY KEY (handler, event_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- Events the work rejected with a permanent error (their mark says REJECTED), and messages
-- without a usable event_id (none, or longer than 255 bytes): what arrived and why it was not
-- processed, for a person to look at. Columns are wide enough for any message, so that
-- quarantining never fails on the message's size (the error text is cut to 64 KiB). handler
-- (Options.Handler) says whose work refused it, for a table that several handlers share. It is
-- NULL in rows of a kit before it (Kit.CreateTables adds the column to such a table).
CREATE TABLE IF NOT EXISTS `quarantined_event` (
  id             BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
  handler        VARBINARY(64)  NULL,
  event_id       LONGBLOB       NOT NULL,
  msg_id         VARCHAR(512)   NULL,
  topic          VARCHAR(512)   NULL,
  msg_key        LONGBLOB       NULL,
  payload        LONGBLOB       NULL,
  headers        JSON           NULL,
  error          TEXT           NOT NULL,
  quarantined_at DATETIME(6)    NOT NULL,
  KEY ix_event_id (event_id(255))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
