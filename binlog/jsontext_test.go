package binlog

import "testing"

func TestMySQLJSONSpacing(t *testing.T) {
	cases := map[string]string{
		`{"c":1}`:                       `{"c": 1}`,
		`{"a":[0,1,true,false],"b":{}}`: `{"a": [0, 1, true, false], "b": {}}`,
		`["x,y:z","q\"r,s",{"k":null}]`: `["x,y:z", "q\"r,s", {"k": null}]`,
		`"a:b,c"`:                       `"a:b,c"`,
		`{"p\\":"\\",",":":"}`:          `{"p\\": "\\", ",": ":"}`,
		`12.5`:                          `12.5`,
		`[]`:                            `[]`,
		`{"e":"🚀,張"}`:                   `{"e": "🚀,張"}`,
	}
	for in, want := range cases {
		if got := string(mysqlJSONSpacing([]byte(in))); got != want {
			t.Errorf("mysqlJSONSpacing(%s) = %s, want %s", in, got, want)
		}
	}
}
