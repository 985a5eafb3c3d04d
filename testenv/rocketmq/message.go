package rocketmq

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// Property separators of RocketMQ's message properties string.
const (
	nameValueSep = '\x01'
	propertySep  = '\x02'
)

// sysFlagCompressed is MessageSysFlag.COMPRESSED_FLAG.
const sysFlagCompressed = 0x1

// parseProperties decodes "name\x01value\x02..." as a Java broker does: an
// item without exactly one separator is skipped.
func parseProperties(s string) map[string]string {
	props := map[string]string{}
	for item := range strings.SplitSeq(s, string(propertySep)) {
		k, v, ok := strings.Cut(item, string(nameValueSep))
		if !ok || k == "" || strings.ContainsRune(v, nameValueSep) {
			continue
		}
		props[k] = v
	}
	return props
}

// batchItem is one message of a MessageBatch body.
type batchItem struct {
	Flag       int32
	Body       []byte
	Properties map[string]string
}

// decodeBatch decodes a MessageBatch body: repeated TOTALSIZE(4) MAGIC(4)
// BODYCRC(4) FLAG(4) BODYSIZE(4) BODY PROPSIZE(2) PROPS. It rejects a body
// whose sizes do not add up instead of guessing.
func decodeBatch(b []byte) ([]batchItem, error) {
	var items []batchItem
	for off := 0; off < len(b); {
		rest := b[off:]
		if len(rest) < 20 {
			return nil, fmt.Errorf("batch message %d: %d bytes left, need at least 20", len(items), len(rest))
		}
		total := binary.BigEndian.Uint32(rest)
		if total < 22 || uint64(total) > uint64(len(rest)) {
			return nil, fmt.Errorf("batch message %d: total size %d out of range (%d bytes left)", len(items), total, len(rest))
		}
		m := rest[:total]
		flag := int32(binary.BigEndian.Uint32(m[12:]))
		bodyLen := binary.BigEndian.Uint32(m[16:])
		if uint64(bodyLen)+22 > uint64(total) {
			return nil, fmt.Errorf("batch message %d: body size %d exceeds total size %d", len(items), bodyLen, total)
		}
		body := m[20 : 20+bodyLen]
		p := m[20+bodyLen:]
		propLen := int(binary.BigEndian.Uint16(p))
		if 2+propLen != len(p) {
			return nil, fmt.Errorf("batch message %d: properties size %d does not match total size %d", len(items), propLen, total)
		}
		items = append(items, batchItem{
			Flag:       flag,
			Body:       bytes.Clone(body),
			Properties: parseProperties(string(p[2:])),
		})
		off += int(total)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("empty batch body")
	}
	return items, nil
}

// inflate undoes the client's zlib compression of a body, reading at most
// limit bytes so a hostile body cannot exhaust memory.
func inflate(b []byte, limit int64) ([]byte, error) {
	r, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("inflate body: %w", err)
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("inflate body: %w", err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("inflated body exceeds %d bytes", limit)
	}
	return out, nil
}
