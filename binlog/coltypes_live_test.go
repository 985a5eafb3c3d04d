package binlog

import (
	"testing"

	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// With binlog_row_metadata=MINIMAL every row's TABLE_MAP types are checked against
// information_schema (typeFits). A false mismatch would stop outboxd on an ordinary table, so
// an outbox table with every common MariaDB 10.11 type (utf8mb4 lengths over 255 bytes, JSON as
// LONGTEXT, MariaDB's own UUID/INET types, fractional seconds, a virtual column) must be read.
func TestLiveMariaDBMinimalMetadataTypes(t *testing.T) {
	s := mariadb.StartT(t, mariadb.Options{RowMetadata: "MINIMAL"})
	ctx := t.Context()
	db, err := s.DB(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec(t, db, `CREATE TABLE outbox_event (
		id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
		c_tiny TINYINT NOT NULL DEFAULT 1, c_bool BOOLEAN NOT NULL DEFAULT TRUE,
		c_small SMALLINT UNSIGNED NOT NULL DEFAULT 2, c_med MEDIUMINT NOT NULL DEFAULT 3, c_int INT NOT NULL DEFAULT 4,
		c_float FLOAT NOT NULL DEFAULT 1.5, c_double DOUBLE NOT NULL DEFAULT 2.5, c_dec DECIMAL(12,4) NOT NULL DEFAULT 3.25,
		c_dec0 DECIMAL(65,0) NOT NULL DEFAULT 7, c_bit BIT(13) NOT NULL DEFAULT b'101', c_bit1 BIT NOT NULL DEFAULT 1,
		c_year YEAR NOT NULL DEFAULT 2024, c_date DATE NOT NULL DEFAULT '2024-02-29',
		c_time TIME(3) NOT NULL DEFAULT '12:34:56.789', c_time0 TIME NOT NULL DEFAULT '01:02:03',
		c_dt DATETIME NOT NULL DEFAULT '2024-01-01 00:00:00', created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
		c_ts TIMESTAMP(2) NULL DEFAULT NULL,
		event_id CHAR(36) NOT NULL, c_char_long CHAR(100) NOT NULL DEFAULT 'x', c_char_latin CHAR(10) CHARACTER SET latin1 NOT NULL DEFAULT 'l',
		c_bin BINARY(16) NOT NULL DEFAULT 'b', c_vb VARBINARY(300) NOT NULL DEFAULT 'vb',
		biz_key VARCHAR(191) NOT NULL, topic VARCHAR(1000) NOT NULL, c_vc_ascii VARCHAR(20) CHARACTER SET ascii NOT NULL DEFAULT 'a',
		c_tinytext TINYTEXT NULL, c_text TEXT NULL, c_mtext MEDIUMTEXT NULL, c_blob BLOB NULL, c_tblob TINYBLOB NULL, c_mblob MEDIUMBLOB NULL,
		payload LONGTEXT NOT NULL, headers JSON NULL, event_type ENUM('created','updated') NULL,
		c_set SET('x','y') NOT NULL DEFAULT 'x,y', c_uuid UUID NULL, c_inet6 INET6 NULL, c_inet4 INET4 NULL, c_point POINT NULL,
		c_virt INT AS (c_int + 1) VIRTUAL, c_stored BIGINT AS (c_int * 2) STORED
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`)
	start := pos(t, db)
	lr := startReader(t, s, start, func(c *Config) { c.Columns = &server.ColumnReader{DB: db} })
	exec(t, db, `INSERT INTO outbox_event (event_id, biz_key, topic, payload, headers, event_type, c_ts, c_uuid, c_inet6, c_inet4, c_point,
		c_tinytext, c_text, c_mtext, c_blob, c_tblob, c_mblob)
		VALUES ('3f0e2a9c-0000-4000-8000-000000000001', 'k-é', 'orders', '{"a":1}', '{"h":"v"}', 'updated', '2024-03-03 03:03:03.12',
		UUID(), '::1', '10.0.0.1', POINT(1, 2), 't', 'tt', 'ttt', 'b', 'tb', 'mb')`)
	got := lr.recv(t, 1)
	wantEventCounts(t, got, 1)
	e := got[0].Events[0]
	wantField(t, "event_id", e.EventID, "3f0e2a9c-0000-4000-8000-000000000001")
	wantField(t, "key", e.Key, "k-é")
	wantField(t, "topic", e.Topic, "orders")
	wantField(t, "payload", e.Payload, `{"a":1}`)
	wantField(t, "headers", e.Headers, `{"h":"v"}`)
	wantField(t, "event_type", e.EventType, "2") // MINIMAL metadata carries no ENUM labels
}
