package rocketmq

import (
	"bytes"
	"encoding/binary"
	"maps"
	"testing"
)

// clientJSONFrame builds a frame the way rocketmq-client-go writes it by
// default (JSON header, serialize type 0).
func clientJSONFrame(header string, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(header)))
	b = append(b, header...)
	return append(b, body...)
}

func TestDecodeClientJSONFrame(t *testing.T) {
	frame := clientJSONFrame(`{"code":105,"language":"GO","version":317,"opaque":7,"flag":0,"remark":"","extFields":{"topic":"orders"}}`, nil)
	cmd, n, err := decodeFrame(frame)
	if err != nil || n != len(frame) {
		t.Fatalf("decode: n=%d err=%v", n, err)
	}
	if cmd.Code != 105 || cmd.Opaque != 7 || cmd.Version != 317 || cmd.ExtFields["topic"] != "orders" || cmd.serialize != serializeJSON {
		t.Fatalf("decoded %+v", cmd)
	}
	if _, _, err := decodeFrame(frame[:len(frame)-1]); err == nil {
		t.Fatal("truncated frame decoded")
	}
}

func TestBinaryHeaderRoundTrip(t *testing.T) {
	in := &command{Code: 310, Version: 317, Opaque: -5, Flag: flagOneway, Remark: "r",
		ExtFields: map[string]string{"a": "grp", "b": "topic", "i": "KEYS\x01k\x02"}, Body: []byte("body"),
		serialize: serializeRocketMQ}
	frame, err := encodeFrame(in)
	if err != nil {
		t.Fatal(err)
	}
	if frame[4] != serializeRocketMQ {
		t.Fatalf("serialize byte %d", frame[4])
	}
	out, n, err := decodeFrame(frame)
	if err != nil || n != len(frame) {
		t.Fatalf("decode: n=%d err=%v", n, err)
	}
	if out.Code != in.Code || out.Opaque != in.Opaque || out.Flag != in.Flag || out.Remark != in.Remark ||
		out.Version != in.Version || !maps.Equal(out.ExtFields, in.ExtFields) || !bytes.Equal(out.Body, in.Body) {
		t.Fatalf("round trip: %+v != %+v", out, in)
	}
}

func TestDecodeBatchRejectsBadSizes(t *testing.T) {
	good := batchBytes([]byte("hello"), "KEYS\x01k1\x02")
	items, err := decodeBatch(append(good, batchBytes(nil, "")...))
	if err != nil || len(items) != 2 || string(items[0].Body) != "hello" || items[0].Properties["KEYS"] != "k1" {
		t.Fatalf("decode: %+v %v", items, err)
	}
	bad := bytes.Clone(good)
	binary.BigEndian.PutUint32(bad[16:], 1000) // body size past the end
	if _, err := decodeBatch(bad); err == nil {
		t.Fatal("batch with oversized body decoded")
	}
	if _, err := decodeBatch(good[:len(good)-1]); err == nil {
		t.Fatal("truncated batch decoded")
	}
}

// batchBytes encodes one message like primitive.Message.Marshal.
func batchBytes(body []byte, props string) []byte {
	size := 20 + len(body) + 2 + len(props)
	b := binary.BigEndian.AppendUint32(nil, uint32(size))
	b = append(b, make([]byte, 12)...) // magic, body CRC, flag
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(props)))
	return append(b, props...)
}

func TestParseProperties(t *testing.T) {
	got := parseProperties("KEYS\x01a b\x02TAGS\x01t\x02junk\x02\x01novalue\x02x\x01y\x01z\x02")
	want := map[string]string{"KEYS": "a b", "TAGS": "t"}
	if !maps.Equal(got, want) {
		t.Fatalf("got %q want %q", got, want)
	}
}

// FuzzDecodeFrame checks that no input makes the frame decoder (or the body
// decoders a send request feeds) panic, and that a decoded binary-header
// frame re-encodes to an equal command.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(clientJSONFrame(`{"code":10,"language":"GO","version":317,"opaque":1,"flag":0,"extFields":{"topic":"t","properties":"KEYS\u0001k\u0002"}}`, []byte("body")))
	f.Add([]byte{0, 0, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, n, err := decodeFrame(data)
		if _, rerr := readFrame(bytes.NewReader(data)); (rerr == nil) != (err == nil) {
			t.Fatalf("readFrame err %v, decodeFrame err %v", rerr, err)
		}
		if err != nil {
			return
		}
		if n < 8 || n > len(data) {
			t.Fatalf("consumed %d of %d", n, len(data))
		}
		_, _ = decodeBatch(cmd.Body)
		_ = parseProperties(cmd.ExtFields["properties"])
		if _, err := inflate(cmd.Body, 1<<20); err == nil && len(cmd.Body) == 0 {
			t.Fatal("inflated an empty body")
		}
		if cmd.serialize != serializeRocketMQ {
			return
		}
		frame, err := encodeFrame(cmd)
		if err != nil {
			return
		}
		again, _, err := decodeFrame(frame)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if again.Code != cmd.Code || again.Opaque != cmd.Opaque || again.Flag != cmd.Flag || again.Remark != cmd.Remark ||
			!maps.Equal(again.ExtFields, cmd.ExtFields) || !bytes.Equal(again.Body, cmd.Body) {
			t.Fatalf("round trip changed the command: %+v -> %+v", cmd, again)
		}
	})
}
