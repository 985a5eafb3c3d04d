package binlog

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outboxd/outboxd/gtid"
)

// nativeSet returns go-mysql's representation of s, for BinlogSyncer.StartSyncGTID.
func nativeSet(s gtid.Set) mysql.GTIDSet { return s.Native() }
