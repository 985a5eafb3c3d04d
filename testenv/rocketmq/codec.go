package rocketmq

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
)

// Serialization types carried in the high byte of the header-length word.
const (
	serializeJSON     = byte(0)
	serializeRocketMQ = byte(1)
)

// Flag bits of a RemotingCommand.
const (
	flagResponse = 1 << 0
	flagOneway   = 1 << 1
)

// maxFrameSize bounds what a peer may make us allocate; a real broker's
// default is 16 MiB (remotingServerMaxFrameSize) as well.
const maxFrameSize = 16 << 20

var errFrameTooLarge = errors.New("frame exceeds 16 MiB")

// command is one decoded RemotingCommand (request or response).
type command struct {
	Code      int
	Language  byte // 0 JAVA, 9 GO in the binary header; informational only
	Version   int
	Opaque    int32
	Flag      int32
	Remark    string
	ExtFields map[string]string
	Body      []byte
	// serialize is the header encoding the peer used; a response uses the same.
	serialize byte
	// conn is the connection a request came in on (not encoded), for the consumer side,
	// which ties a client to it.
	conn *serverConn
}

func (c *command) isResponse() bool { return c.Flag&flagResponse != 0 }
func (c *command) isOneway() bool   { return c.Flag&flagOneway != 0 }

// readFrame reads one frame (4-byte total length, then the rest) from r and
// decodes it. It blocks until a whole frame arrived or r fails.
func readFrame(r io.Reader) (*command, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(lenBuf[:])
	if n > maxFrameSize {
		return nil, errFrameTooLarge
	}
	if n < 4 {
		return nil, fmt.Errorf("frame length %d shorter than its header-length word", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return decodeFrameBody(buf)
}

// decodeFrame decodes one complete frame held in b (including its 4-byte
// length prefix) and returns the command and the bytes consumed. It never
// panics: every length is checked against what is present.
func decodeFrame(b []byte) (*command, int, error) {
	if len(b) < 4 {
		return nil, 0, io.ErrUnexpectedEOF
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxFrameSize {
		return nil, 0, errFrameTooLarge
	}
	if uint64(len(b)-4) < uint64(n) {
		return nil, 0, io.ErrUnexpectedEOF
	}
	cmd, err := decodeFrameBody(b[4 : 4+n])
	if err != nil {
		return nil, 0, err
	}
	return cmd, 4 + int(n), nil
}

// decodeFrameBody decodes a frame without its total-length prefix:
// header-length word (serialize type in the high byte), header, body.
func decodeFrameBody(b []byte) (*command, error) {
	if len(b) < 4 {
		return nil, io.ErrUnexpectedEOF
	}
	word := binary.BigEndian.Uint32(b)
	ser := byte(word >> 24)
	hlen := int(word & 0xFFFFFF)
	if hlen > len(b)-4 {
		return nil, fmt.Errorf("header length %d exceeds frame (%d bytes left)", hlen, len(b)-4)
	}
	header := b[4 : 4+hlen]
	var (
		cmd *command
		err error
	)
	switch ser {
	case serializeJSON:
		cmd, err = decodeJSONHeader(header)
	case serializeRocketMQ:
		cmd, err = decodeBinaryHeader(header)
	default:
		return nil, fmt.Errorf("unknown serialize type %d", ser)
	}
	if err != nil {
		return nil, err
	}
	cmd.serialize = ser
	if body := b[4+hlen:]; len(body) > 0 {
		cmd.Body = bytes.Clone(body)
	}
	return cmd, nil
}

// jsonHeader mirrors RemotingCommand's JSON form. Language is "JAVA"/"GO"
// text from real clients; it is decoded loosely because only the code,
// opaque, flag and fields matter here.
type jsonHeader struct {
	Code      int               `json:"code"`
	Language  json.RawMessage   `json:"language,omitempty"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`
	// SerializeTypeCurrentRPC is what a Java broker writes; harmless to clients.
	SerializeTypeCurrentRPC string `json:"serializeTypeCurrentRPC,omitempty"`
}

func decodeJSONHeader(h []byte) (*command, error) {
	var jh jsonHeader
	if err := json.Unmarshal(h, &jh); err != nil {
		return nil, fmt.Errorf("decode JSON header: %w", err)
	}
	cmd := &command{
		Code: jh.Code, Version: jh.Version, Opaque: jh.Opaque, Flag: jh.Flag,
		Remark: jh.Remark, ExtFields: jh.ExtFields,
	}
	if cmd.ExtFields == nil {
		cmd.ExtFields = map[string]string{}
	}
	return cmd, nil
}

// decodeBinaryHeader decodes RocketMQSerializable's header: code(2)
// language(1) version(2) opaque(4) flag(4) remarkLen(4) remark extLen(4) ext,
// ext being repeated keyLen(2) key valueLen(4) value.
func decodeBinaryHeader(h []byte) (*command, error) {
	const fixed = 2 + 1 + 2 + 4 + 4 + 4
	if len(h) < fixed {
		return nil, fmt.Errorf("binary header of %d bytes is shorter than %d", len(h), fixed)
	}
	cmd := &command{
		Code:     int(int16(binary.BigEndian.Uint16(h[0:]))),
		Language: h[2],
		Version:  int(int16(binary.BigEndian.Uint16(h[3:]))),
		Opaque:   int32(binary.BigEndian.Uint32(h[5:])),
		Flag:     int32(binary.BigEndian.Uint32(h[9:])),
	}
	p := h[13:]
	rlen := binary.BigEndian.Uint32(p)
	p = p[4:]
	if uint64(rlen) > uint64(len(p)) {
		return nil, fmt.Errorf("remark length %d exceeds header", rlen)
	}
	cmd.Remark = string(p[:rlen])
	p = p[rlen:]
	if len(p) < 4 {
		return nil, fmt.Errorf("binary header truncated before ext fields length")
	}
	elen := binary.BigEndian.Uint32(p)
	p = p[4:]
	if uint64(elen) > uint64(len(p)) {
		return nil, fmt.Errorf("ext fields length %d exceeds header", elen)
	}
	ext := p[:elen]
	cmd.ExtFields = map[string]string{}
	for len(ext) > 0 {
		if len(ext) < 2 {
			return nil, fmt.Errorf("ext field key length truncated")
		}
		kl := int(binary.BigEndian.Uint16(ext))
		ext = ext[2:]
		if kl > len(ext) {
			return nil, fmt.Errorf("ext field key length %d exceeds header", kl)
		}
		k := string(ext[:kl])
		ext = ext[kl:]
		if len(ext) < 4 {
			return nil, fmt.Errorf("ext field value length truncated")
		}
		vl := binary.BigEndian.Uint32(ext)
		ext = ext[4:]
		if uint64(vl) > uint64(len(ext)) {
			return nil, fmt.Errorf("ext field value length %d exceeds header", vl)
		}
		cmd.ExtFields[k] = string(ext[:vl])
		ext = ext[vl:]
	}
	return cmd, nil
}

// encodeFrame encodes cmd as a complete frame in the serialization cmd.serialize.
func encodeFrame(cmd *command) ([]byte, error) {
	var header []byte
	switch cmd.serialize {
	case serializeRocketMQ:
		header = encodeBinaryHeader(cmd)
	default:
		jh := jsonHeader{
			Code: cmd.Code, Language: json.RawMessage(`"JAVA"`), Version: cmd.Version,
			Opaque: cmd.Opaque, Flag: cmd.Flag, Remark: cmd.Remark, ExtFields: cmd.ExtFields,
			SerializeTypeCurrentRPC: "JSON",
		}
		var err error
		header, err = json.Marshal(jh)
		if err != nil {
			return nil, fmt.Errorf("encode JSON header: %w", err)
		}
	}
	total := 4 + len(header) + len(cmd.Body)
	if total > maxFrameSize {
		return nil, errFrameTooLarge
	}
	out := make([]byte, 8, 4+total)
	binary.BigEndian.PutUint32(out[0:], uint32(total))
	binary.BigEndian.PutUint32(out[4:], uint32(cmd.serialize)<<24|uint32(len(header)))
	out = append(out, header...)
	out = append(out, cmd.Body...)
	return out, nil
}

func encodeBinaryHeader(cmd *command) []byte {
	var ext []byte
	keys := make([]string, 0, len(cmd.ExtFields))
	for k := range cmd.ExtFields {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic output helps when comparing captures
	for _, k := range keys {
		v := cmd.ExtFields[k]
		ext = binary.BigEndian.AppendUint16(ext, uint16(len(k)))
		ext = append(ext, k...)
		ext = binary.BigEndian.AppendUint32(ext, uint32(len(v)))
		ext = append(ext, v...)
	}
	h := make([]byte, 0, 21+len(cmd.Remark)+len(ext))
	h = binary.BigEndian.AppendUint16(h, uint16(int16(cmd.Code)))
	h = append(h, 0) // language JAVA, as a real broker
	h = binary.BigEndian.AppendUint16(h, uint16(int16(cmd.Version)))
	h = binary.BigEndian.AppendUint32(h, uint32(cmd.Opaque))
	h = binary.BigEndian.AppendUint32(h, uint32(cmd.Flag))
	h = binary.BigEndian.AppendUint32(h, uint32(len(cmd.Remark)))
	h = append(h, cmd.Remark...)
	h = binary.BigEndian.AppendUint32(h, uint32(len(ext)))
	h = append(h, ext...)
	return h
}
