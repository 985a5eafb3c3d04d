package rmqprops

import (
	"bytes"
	"strings"
	"testing"
)

func TestEncodeValue(t *testing.T) {
	for _, v := range [][]byte{{}, []byte("plain"), {0}, {1}, {2}, {0xff}, []byte("base64:"), []byte("base64:xyz"), []byte("a b\tc")} {
		enc := EncodeValue(v)
		if strings.ContainsAny(enc, "\x00\x01\x02") {
			t.Errorf("EncodeValue(%q) = %q has a separator", v, enc)
		}
		dec, err := decodeValue(enc)
		if err != nil || !bytes.Equal(dec, v) {
			t.Errorf("round trip of %q: %q %v", v, dec, err)
		}
	}
	if EncodeValue([]byte("plain")) != "plain" {
		t.Error("plain text was encoded")
	}
}
