package messages_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// compactRef is the reference compaction: encoding/json's, which keeps every
// byte but insignificant whitespace.
func compactRef(t testing.TB, s string) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, json.Compact(&buf, []byte(s)))
	return buf.String()
}

func TestParseJSONAccepts(t *testing.T) {
	for _, in := range []string{
		`null`, `true`, `false`,
		`""`, `"text"`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, `"é😀"`,
		`0`, `-1`, `1.5`, `-0.5`, `1.0`, `1E2`, `1e-2`, `1E+2`, `0.1`,
		`123456789012345678901234567890`,
		`1e-400`,  // underflows to +0, which is fine
		`-1e-320`, // a negative subnormal, not zero
		`1.7976931348623157e308`,
		`[]`, `{}`, `[1,"a",null,true,{"k":[]}]`,
		`{"a":{"a":{"a":1}}}`, // the same key at different depths is not a duplicate
		`[{"a":1},{"a":2}]`,   // nor in sibling objects
		`{"a":1,"A":2,"\u0062":3}`,
		` { "a" : [ 1 , 2 ] , "b" : "x y" } `,
		"\t\r\n[\n1\n]\n",
	} {
		t.Run(in, func(t *testing.T) {
			j, err := messages.ParseJSONString(in)
			require.NoError(t, err)
			require.Equal(t, compactRef(t, in), j.String())
		})
	}
}

func TestParseJSONRejects(t *testing.T) {
	for _, tc := range []struct {
		name, in string
	}{
		{"empty", ``},
		{"whitespace only", "  \n"},
		{"negative zero", `-0`},
		{"negative zero fraction", `-0.0`},
		{"negative zero exponent", `-0e3`},
		{"negative zero in array", `[1,-0]`},
		{"negative zero in object", `{"a":{"b":-0.000}}`},
		{"negative underflow", `-1e-400`},
		{"overflow", `1e400`},
		{"negative overflow", `-1e400`},
		{"long overflow", strings.Repeat("9", 400)},
		{"duplicate key", `{"a":1,"a":2}`},
		{"duplicate key deep", `[{"x":[{"a":1,"b":2,"a":3}]}]`},
		{"duplicate key via escape", `{"é":1,"\u00e9":2}`},
		{"duplicate key via surrogate pair", `{"😀":1,"\ud83d\ude00":2}`},
		{"duplicate key in large object", `{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,` +
			`"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k18":18,"k3":19}`},
		{"trailing garbage", `{} x`},
		{"two values", `1 2`},
		{"trailing comma array", `[1,]`},
		{"trailing comma object", `{"a":1,}`},
		{"leading zero", `01`},
		{"bare dot", `1.`},
		{"plus sign", `+1`},
		{"NaN", `NaN`},
		{"Infinity", `Infinity`},
		{"hex", `0x10`},
		{"single quotes", `'a'`},
		{"unquoted key", `{a:1}`},
		{"bad literal", `tru`},
		{"bad escape", `"\x"`},
		{"short unicode escape", `"\u12"`},
		{"raw control character", "\"a\nb\""},
		{"unterminated string", `"abc`},
		{"unterminated array", `[1,2`},
		{"unterminated object", `{"a":1`},
		{"mismatched brackets", `[1}`},
		{"invalid UTF-8 in string", "\"\xff\""},
		{"encoded surrogate in string", "\"\xed\xa0\x80\""},
		{"invalid UTF-8 outside strings", "[\xff]"},
		{"byte order mark", "\xef\xbb\xbf{}"},
		{"missing colon", `{"a" 1}`},
		{"non-string key", `{1:1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := messages.ParseJSONString(tc.in)
			require.ErrorIs(t, err, messages.ErrNotJSON)
		})
	}
}

// The harness validates iteratively, with no depth limit, and so must we:
// 100,000 levels must neither overflow a stack nor be refused.
// (encoding/json's scanner, which ParseJSON used at first, refuses more than
// 10,000 levels.)
func TestParseJSONDeepNesting(t *testing.T) {
	const depth = 100_000
	for _, tc := range []struct {
		name, open, leaf, close string
	}{
		{"arrays", "[", "1", "]"},
		{"objects", `{"a":`, "1", "}"},
		{"mixed", `[{"k":`, `"v"`, "}]"},
		{"spaced", "[ ", "null", " ]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := strings.Repeat(tc.open, depth) + tc.leaf + strings.Repeat(tc.close, depth)
			j, err := messages.ParseJSONString(in)
			require.NoError(t, err)
			require.Equal(t, strings.ReplaceAll(in, " ", ""), j.String())
			require.True(t, j.Equal(j))

			// A duplicate key or a -0 at the bottom is still found.
			bad := strings.Repeat(tc.open, depth) + `{"d":1,"d":2}` + strings.Repeat(tc.close, depth)
			_, err = messages.ParseJSONString(bad)
			require.ErrorIs(t, err, messages.ErrNotJSON)
			bad = strings.Repeat(tc.open, depth) + `-0` + strings.Repeat(tc.close, depth)
			_, err = messages.ParseJSONString(bad)
			require.ErrorIs(t, err, messages.ErrNotJSON)
		})
	}
	t.Run("unbalanced", func(t *testing.T) {
		_, err := messages.ParseJSONString(strings.Repeat("[", depth) + strings.Repeat("]", depth-1))
		require.ErrorIs(t, err, messages.ErrNotJSON)
	})
	t.Run("accessors", func(t *testing.T) {
		j := messages.MustParseJSON(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		n := 0
		for e := range j.Elements() {
			n++
			require.Equal(t, (depth-1)*2, e.Len())
		}
		require.Equal(t, 1, n)
	})
}

func TestParseJSONRoundTripsByteForByte(t *testing.T) {
	for _, in := range []string{
		`1.0`, `1E2`, `1e+2`, `-1.50`, `123456789012345678901234567890`, `0.1`, `0.10000000000000000001`,
		`"\u00e9"`, `"\u00E9"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udc00\ud800"`, `"\/"`, `"é"`,
		`{"b":1,"a":2,"c":{"z":[],"y":{}}}`,
		` { "b" : 1.0 , "a" : [ "x y" , 1E2 ] } `,
		`{"":"","\u0000":null}`,
	} {
		t.Run(in, func(t *testing.T) {
			j, err := messages.ParseJSONString(in)
			require.NoError(t, err)
			want := compactRef(t, in)
			require.Equal(t, want, j.String())
			require.Equal(t, want, string(j.Bytes()))
			require.Equal(t, len(want), j.Len())
			out, err := json.Marshal(j)
			require.NoError(t, err)
			require.Equal(t, want, string(out))
		})
	}
}

func TestJSONEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{`1`, `1.0`, true},
		{`1`, `1e0`, true},
		{`100`, `1E2`, true},
		{`0.1`, `1e-1`, true},
		{`1`, `2`, false},
		{`123456789012345678901234567890`, `123456789012345678901234567891`, true}, // the same double
		{`"é"`, `"\u00e9"`, true},
		{`"😀"`, `"\ud83d\ude00"`, true},
		{`"\ud800"`, `"\udbff"`, false}, // distinct lone surrogates are distinct strings
		{`"\ud800"`, `"\ud800"`, true},
		{`"a"`, `"b"`, false},
		{`"a"`, `"\u0062"`, false},
		{`{"a":1,"b":2}`, `{"b":2,"a":1}`, true},
		{`{"a":1,"b":2}`, `{"b":2,"a":1.0}`, true},
		{`{"a":1,"b":2}`, `{"a":1}`, false},
		{`{"a":1}`, `{"a":1,"b":2}`, false},
		{`{"a":1,"b":2}`, `{"a":1,"c":2}`, false},
		{`{"é":1}`, `{"\u00e9":1}`, true},
		{`{"a":{"x":[1,{"y":2}]}}`, `{"a":{"x":[1.0,{"y":2e0}]}}`, true},
		{`[1,2]`, `[2,1]`, false},
		{`[1,2]`, `[1,2,3]`, false},
		{`[1,2,3]`, `[1,2]`, false},
		{`[]`, `[]`, true},
		{`[]`, `{}`, false},
		{`null`, `false`, false},
		{`true`, `false`, false},
		{`"1"`, `1`, false},
		{`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9}`,
			`{"k9":9,"k8":8,"k7":7,"k6":6,"k5":5,"k4":4,"k3":3,"k2":2,"k1":1,"k0":0.0}`, true},
		{`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9}`,
			`{"k9":9,"k8":8,"k7":7,"k6":6,"k5":5,"k4":4,"k3":3,"k2":2,"k1":1,"kx":0}`, false},
	} {
		t.Run(tc.a+" vs "+tc.b, func(t *testing.T) {
			a, b := messages.MustParseJSON(tc.a), messages.MustParseJSON(tc.b)
			require.Equal(t, tc.want, a.Equal(b))
			require.Equal(t, tc.want, b.Equal(a), "Equal is symmetric")
			require.True(t, a.Equal(a))
		})
	}
	require.True(t, messages.JSON{}.Equal(messages.JSON{}))
	require.False(t, messages.JSON{}.Equal(messages.JSONNull))
}

func TestJSONAccessors(t *testing.T) {
	obj := messages.MustParseJSON(`{"b":1,"a":[true,"x"],"\u00e9":{"n":null},"":""}`)

	type member struct {
		key, val string
	}
	var got []member
	for k, v := range obj.Members() {
		got = append(got, member{k, v.String()})
	}
	require.Equal(t, []member{{"b", "1"}, {"a", `[true,"x"]`}, {"é", `{"n":null}`}, {"", `""`}}, got)
	require.Equal(t, []string{"b", "a", "é", ""}, obj.Keys())

	for _, tc := range []struct {
		key, want string
		ok        bool
	}{
		{"b", "1", true},
		{"a", `[true,"x"]`, true},
		{"é", `{"n":null}`, true},
		{"", `""`, true},
		{"missing", "", false},
	} {
		v, ok := obj.Field(tc.key)
		require.Equal(t, tc.ok, ok, tc.key)
		require.Equal(t, tc.want, v.String(), tc.key)
	}

	// Early break out of the iterators.
	for k := range obj.Members() {
		require.Equal(t, "b", k)
		break
	}
	arr := messages.MustParseJSON(`[1,"two",[3],{"4":4},null]`)
	var elems []string
	for e := range arr.Elements() {
		elems = append(elems, e.String())
	}
	require.Equal(t, []string{"1", `"two"`, "[3]", `{"4":4}`, "null"}, elems)
	for e := range arr.Elements() {
		require.Equal(t, "1", e.String())
		break
	}

	// Non-containers yield nothing.
	for _, s := range []string{`1`, `"s"`, `null`, `[]`} {
		j := messages.MustParseJSON(s)
		require.Nil(t, j.Keys(), s)
		_, ok := j.Field("a")
		require.False(t, ok, s)
	}
	for range messages.MustParseJSON(`{"a":1}`).Elements() {
		t.Fatal("an object has no elements")
	}
	for range (messages.JSON{}).Members() {
		t.Fatal("the zero JSON has no members")
	}
}

func TestJSONKind(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want messages.Kind
	}{
		{`null`, messages.KindNull},
		{`true`, messages.KindBool},
		{`false`, messages.KindBool},
		{`0`, messages.KindNumber},
		{`-1.5e3`, messages.KindNumber},
		{`""`, messages.KindString},
		{`[]`, messages.KindArray},
		{`{}`, messages.KindObject},
	} {
		require.Equal(t, tc.want, messages.MustParseJSON(tc.in).Kind(), tc.in)
	}
	require.Equal(t, messages.KindInvalid, messages.JSON{}.Kind())
	require.True(t, messages.JSON{}.IsZero())
	require.Equal(t, "null", messages.JSONNull.String())
}

func TestJSONAsString(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`"plain"`, "plain", true},
		{`""`, "", true},
		{`"\u00e9"`, "é", true},
		{`"\ud83d\ude00"`, "😀", true},
		{`"\ud800"`, "\uFFFD", true}, // a lone surrogate has no UTF-8 form
		{`"a\ud800b\udc00"`, "a\uFFFDb\uFFFD", true},
		{`"\"\\\/\b\f\n\r\t"`, "\"\\/\b\f\n\r\t", true},
		{`"\u0000"`, "\x00", true},
		{`1`, "", false},
		{`null`, "", false},
		{`["a"]`, "", false},
	} {
		got, ok := messages.MustParseJSON(tc.in).AsString()
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		if ok {
			var ref string
			require.NoError(t, json.Unmarshal([]byte(tc.in), &ref))
			require.Equal(t, ref, got, "agrees with encoding/json: %s", tc.in)
		}
	}
	_, ok := messages.JSON{}.AsString()
	require.False(t, ok)
}

func TestJSONAsInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{`0`, 0, true},
		{`42`, 42, true},
		{`-42`, -42, true},
		{`1.0`, 1, true},
		{`1e2`, 100, true},
		{`1E+2`, 100, true},
		{`0.5e1`, 5, true},
		{`9007199254740991`, 1<<53 - 1, true},
		{`-9007199254740991`, -(1<<53 - 1), true},
		{`9007199254740992`, 0, false},
		{`-9007199254740992`, 0, false},
		{`9007199254740991.0`, 1<<53 - 1, true},
		{`1e16`, 0, false},
		{`123456789012345678901234567890`, 0, false},
		{`1.5`, 0, false},
		{`0.1`, 0, false},
		{`1e-400`, 0, true}, // underflows to 0, an integer in JavaScript too
		{`"1"`, 0, false},
		{`true`, 0, false},
		{`null`, 0, false},
	} {
		got, ok := messages.MustParseJSON(tc.in).AsInt()
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	_, ok := messages.JSON{}.AsInt()
	require.False(t, ok)
}

func TestJSONAsBool(t *testing.T) {
	for _, tc := range []struct {
		in       string
		want, ok bool
	}{
		{`true`, true, true},
		{`false`, false, true},
		{`null`, false, false},
		{`"true"`, false, false},
		{`1`, false, false},
	} {
		got, ok := messages.MustParseJSON(tc.in).AsBool()
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestMarshalValue(t *testing.T) {
	type payload struct {
		Text  string         `json:"text"`
		N     int            `json:"n"`
		F     float64        `json:"f"`
		Tags  []string       `json:"tags,omitempty"`
		Extra map[string]int `json:"extra,omitempty"`
	}
	for _, tc := range []struct {
		name string
		get  func() (messages.JSON, error)
		want string
	}{
		{"struct", func() (messages.JSON, error) {
			return messages.MarshalValue(payload{Text: "<a & b>", N: 2, F: 0.5, Tags: []string{"x"}})
		}, `{"text":"<a & b>","n":2,"f":0.5,"tags":["x"]}`},
		{"map keys sorted", func() (messages.JSON, error) {
			return messages.MarshalValue(map[string]int{"b": 2, "a": 1})
		}, `{"a":1,"b":2}`},
		{"string", func() (messages.JSON, error) { return messages.MarshalValue("é\n") }, `"é\n"`},
		{"nil slice", func() (messages.JSON, error) { return messages.MarshalValue([]int(nil)) }, `null`},
		{"JSON value verbatim", func() (messages.JSON, error) {
			return messages.MarshalValue(messages.MustParseJSON(`{"b":1.0,"a":"\u00e9"}`))
		}, `{"b":1.0,"a":"\u00e9"}`},
		{"zero JSON", func() (messages.JSON, error) { return messages.MarshalValue(messages.JSON{}) }, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := tc.get()
			require.NoError(t, err)
			require.Equal(t, tc.want, j.String())
		})
	}
	for name, get := range map[string]func() (messages.JSON, error){
		"NaN":           func() (messages.JSON, error) { return messages.MarshalValue(math.NaN()) },
		"Inf":           func() (messages.JSON, error) { return messages.MarshalValue(math.Inf(1)) },
		"negative zero": func() (messages.JSON, error) { return messages.MarshalValue(math.Copysign(0, -1)) },
		"channel":       func() (messages.JSON, error) { return messages.MarshalValue(make(chan int)) },
	} {
		t.Run(name, func(t *testing.T) {
			_, err := get()
			require.ErrorIs(t, err, messages.ErrNotJSON)
		})
	}
}

func TestJSONUnmarshalIntoStructField(t *testing.T) {
	type envelope struct {
		Type string        `json:"type"`
		Data messages.JSON `json:"data"`
	}
	var e envelope
	require.NoError(t, json.Unmarshal([]byte(`{"type":"x","data": { "b" : [1.0, 2] , "a":"\u00e9" } }`), &e))
	require.Equal(t, "x", e.Type)
	require.Equal(t, `{"b":[1.0,2],"a":"\u00e9"}`, e.Data.String())

	out, err := json.Marshal(e)
	require.NoError(t, err)
	require.Equal(t, `{"type":"x","data":{"b":[1.0,2],"a":"\u00e9"}}`, string(out))

	require.NoError(t, json.Unmarshal([]byte(`{"data":null}`), &e))
	require.Equal(t, messages.JSONNull, e.Data)

	for _, bad := range []string{`{"data":-0}`, `{"data":{"a":1,"a":2}}`, `{"data":[1e999]}`} {
		var e envelope
		require.ErrorIs(t, json.Unmarshal([]byte(bad), &e), messages.ErrNotJSON, bad)
	}

	out, err = json.Marshal(envelope{Type: "zero"})
	require.NoError(t, err)
	require.Equal(t, `{"type":"zero","data":null}`, string(out))
}

func TestJSONStringLiteral(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", `"plain"`},
		{"<a&b>", `"<a&b>"`}, // as JSON.stringify writes it, no HTML escaping
		{"\u2028", "\"\u2028\""},
		{"a\"b\\c\n", `"a\"b\\c\n"`},
		{"\xff", "\"\uFFFD\""},
	} {
		j := messages.JSONString(tc.in)
		require.Equal(t, tc.want, j.String(), tc.in)
		require.Equal(t, j, messages.MustParseJSON(tc.want))
	}
}

// quotedRef is what AppendQuoted must encode: s with each byte that does not
// start a valid UTF-8 sequence replaced by U+FFFD.
func quotedRef(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r) // RuneError for an invalid byte
		i += size
	}
	return b.String()
}

func TestAppendQuoted(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"abc", `"abc"`},
		{`"`, `"\""`},
		{`\`, `"\\"`},
		{"/", `"/"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"\x7f", "\"\x7f\""},
		{"<>&", `"<>&"`},
		{"é😀\u2028", "\"é😀\u2028\""},
		{"a\xffb", "\"a\uFFFDb\""},
		{"\xe2\x82", "\"\uFFFD\uFFFD\""},           // truncated sequence: one U+FFFD per byte
		{"\xed\xa0\x80", "\"\uFFFD\uFFFD\uFFFD\""}, // an encoded surrogate is invalid UTF-8
	} {
		got := messages.AppendQuoted([]byte("prefix:"), tc.in)
		require.Equal(t, "prefix:"+tc.want, string(got), "%q", tc.in)
	}

	// Random strings over an alphabet heavy in what needs care.
	alphabet := []string{"a", "Z", " ", `"`, `\`, "/", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "😀",
		"\u2028", "<", "\xff", "\xc3", "\xed\xa0\x80", "\xf0\x9f", "\uFFFD"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(20) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		s := b.String()
		out := messages.AppendQuoted(nil, s)
		require.True(t, utf8.Valid(out), "%q", s)
		var dec string
		require.NoError(t, json.Unmarshal(out, &dec), "%q -> %s", s, out)
		require.Equal(t, quotedRef(s), dec, "%q", s)
		j, err := messages.ParseJSON(out)
		require.NoError(t, err, "%q", s)
		require.Equal(t, string(out), j.String())
		got, ok := j.AsString()
		require.True(t, ok)
		require.Equal(t, dec, got)
	}
}

func TestObjectBuilder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(o *messages.ObjectBuilder)
		want  string
	}{
		{"empty", func(*messages.ObjectBuilder) {}, `{}`},
		{"all kinds in call order", func(o *messages.ObjectBuilder) {
			o.String("s", "x\"y").Int("i", -3).Float("f", 0.7).Bool("b", true).Raw("r", messages.MustParseJSON(`[1.0]`))
		}, `{"s":"x\"y","i":-3,"f":0.7,"b":true,"r":[1.0]}`},
		{"zero raw is absent", func(o *messages.ObjectBuilder) {
			o.Raw("gone", messages.JSON{}).Int("kept", 1).Raw("gone2", messages.JSON{})
		}, `{"kept":1}`},
		{"int extremes", func(o *messages.ObjectBuilder) {
			o.Int("min", math.MinInt64).Int("max", math.MaxInt64)
		}, `{"min":-9223372036854775808,"max":9223372036854775807}`},
		{"floats as JavaScript writes them", func(o *messages.ObjectBuilder) {
			o.Float("a", 1e-7).Float("b", 1e21).Float("c", 123456789012345680000).Float("d", -1.5).
				Float("e", 1e-6).Float("f", 0).Float("g", 100).Float("h", 1.5e300).Float("i", 5e-324)
		}, `{"a":1e-7,"b":1e+21,"c":123456789012345680000,"d":-1.5,"e":0.000001,"f":0,"g":100,"h":1.5e+300,"i":5e-324}`},
		{"non-finite floats become 0", func(o *messages.ObjectBuilder) {
			o.Float("nan", math.NaN()).Float("inf", math.Inf(-1)).Float("negzero", math.Copysign(0, -1))
		}, `{"nan":0,"inf":0,"negzero":0}`},
		{"keys are escaped", func(o *messages.ObjectBuilder) {
			o.Bool("a\"\n\xff", false)
		}, "{\"a\\\"\\n\uFFFD\":false}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o messages.ObjectBuilder
			tc.build(&o)
			j := o.Build()
			require.Equal(t, tc.want, j.String())
			// What the builder writes is lossless JSON, already compact.
			p, err := messages.ParseJSONString(j.String())
			require.NoError(t, err)
			require.Equal(t, j, p)
		})
	}

	t.Run("reset reuses", func(t *testing.T) {
		var o messages.ObjectBuilder
		first := o.String("a", "1").Build()
		o.Reset()
		second := o.Int("b", 2).Build()
		require.Equal(t, `{"a":"1"}`, first.String())
		require.Equal(t, `{"b":2}`, second.String())
	})

	t.Run("nested objects", func(t *testing.T) {
		var inner, outer messages.ObjectBuilder
		require.Equal(t, `{"e":{}}`, outer.Object("e", &inner).Build().String())
		inner.Int("x", 1)
		outer.Reset()
		got := outer.String("a", "b").Object("in", &inner).Build()
		require.Equal(t, `{"a":"b","in":{"x":1}}`, got.String())
		// inner is only read: it goes on, and so does outer.
		require.Equal(t, `{"x":1,"y":2}`, inner.Int("y", 2).Build().String())
		require.Equal(t, `{"a":"b","in":{"x":1},"in2":{"x":1,"y":2}}`, outer.Object("in2", &inner).Build().String())
	})

	t.Run("truncate to a length", func(t *testing.T) {
		var o messages.ObjectBuilder
		empty := o.Len()
		o.Int("turn", 1)
		shared := o.Len()
		var built []string
		for _, s := range []string{"a", "b"} {
			o.Truncate(shared)
			built = append(built, o.String("text", s).Build().String())
		}
		require.Equal(t, []string{`{"turn":1,"text":"a"}`, `{"turn":1,"text":"b"}`}, built)
		o.Truncate(empty)
		require.Equal(t, `{}`, o.Build().String())
		require.Panics(t, func() { o.Truncate(shared) })
		require.Panics(t, func() { o.Truncate(-1) })
	})

	t.Run("floats agree with encoding/json", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for range 2000 {
			f := math.Float64frombits(rng.Uint64())
			if math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			var o messages.ObjectBuilder
			got := o.Float("f", f).Build()
			want, err := json.Marshal(map[string]float64{"f": f})
			require.NoError(t, err)
			if f == 0 {
				want = []byte(`{"f":0}`)
			}
			require.Equal(t, string(want), got.String())
		}
	})
}

func TestArrayBuilders(t *testing.T) {
	require.Equal(t, `[]`, messages.ArrayOf().String())
	require.Equal(t, `[1.0,null,"x"]`, messages.ArrayOf(messages.MustParseJSON(`1.0`), messages.JSON{}, messages.JSONString("x")).String())
}

func TestMustParseJSONPanicsOnBadInput(t *testing.T) {
	require.Panics(t, func() { messages.MustParseJSON(`-0`) })
}

// walkJSON visits every value inside j, iteratively, checking that each one
// is itself lossless compact JSON and that the accessors agree with it.
func walkJSON(t testing.TB, j messages.JSON) {
	queue := []messages.JSON{j}
	for len(queue) > 0 {
		v := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		p, err := messages.ParseJSONString(v.String())
		require.NoError(t, err, "sub-value %s", v)
		require.Equal(t, v, p)
		switch v.Kind() {
		case messages.KindObject:
			n := 0
			for _, m := range v.Members() {
				queue = append(queue, m)
				n++
			}
			require.Len(t, v.Keys(), n)
		case messages.KindArray:
			for e := range v.Elements() {
				queue = append(queue, e)
			}
		case messages.KindString:
			_, ok := v.AsString()
			require.True(t, ok)
		case messages.KindNumber:
			v.AsInt()
		case messages.KindBool:
			_, ok := v.AsBool()
			require.True(t, ok)
		case messages.KindNull:
		default:
			t.Fatalf("sub-value %q has no kind", v)
		}
	}
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`null`, `true`, `false`, `""`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, `0`, `-1`, `1.0`, `1E2`,
		`123456789012345678901234567890`, `0.1`, `1e-400`, `-1e-320`, `[]`, `{}`,
		`{"b":1,"a":[true,null,"x"]}`, ` { "a" : [ 1 , 2 ] } `, `{"a":{"a":1}}`, `{"é":1,"\u00e9":2}`,
		`{"\ud800":1,"\udbff":2}`,
		`-0`, `-0.0`, `-0e3`, `-1e-400`, `1e400`, `{"a":1,"a":2}`, `[{"x":{"a":1,"a":2}}]`,
		`{} x`, ``, "\"\xff\"", `[1,]`, `01`, `"\x"`, `{"a" 1}`,
		strings.Repeat("[", 50) + strings.Repeat("]", 50),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		j, err := messages.ParseJSON(data)
		require.Equal(t, orig, data, "ParseJSON must not modify its input")
		if err != nil {
			require.ErrorIs(t, err, messages.ErrNotJSON)
			require.True(t, j.IsZero())
			// Whatever encoding/json accepts as a valid UTF-8 text, we refuse
			// only for the harness's extra rules.
			if json.Valid(data) && utf8.Valid(data) {
				msg := err.Error()
				require.True(t, strings.Contains(msg, "negative zero") || strings.Contains(msg, "not finite") ||
					strings.Contains(msg, "duplicate key"), "valid JSON %q refused: %v", data, err)
			}
			return
		}
		out := j.Bytes()
		require.True(t, json.Valid(out), "output %q is not valid JSON", out)
		require.True(t, utf8.Valid(out))
		require.True(t, json.Valid(data), "accepted %q that encoding/json rejects", data)
		require.Equal(t, compactRef(t, string(data)), string(out))

		again, err := messages.ParseJSON(out)
		require.NoError(t, err)
		require.Equal(t, j.String(), again.String())
		require.True(t, j.Equal(again))
		require.True(t, j.Equal(j))

		// Compaction changes nothing encoding/json can see.
		var a, b any
		da := json.NewDecoder(bytes.NewReader(data))
		da.UseNumber()
		require.NoError(t, da.Decode(&a))
		db := json.NewDecoder(bytes.NewReader(out))
		db.UseNumber()
		require.NoError(t, db.Decode(&b))
		require.True(t, reflect.DeepEqual(a, b))

		walkJSON(t, j)
	})
}

// A typical assistant/chunk line, from the fixtures (acp/text-turn).
const chunkLine = `{"type":"assistant/chunk","seq":9,"time":1785730685958,"data":{"turn":1,"step":1,` +
	`"chunk":{"type":"block-end","index":0,"block":{"type":"text","text":"Hello from the replay ` +
	`fixture — with a multi-byte dash and \"quotes\"."}}}}`

func BenchmarkParseJSON(b *testing.B) {
	line := []byte(chunkLine)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := messages.ParseJSON(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseJSONText parses a line that is mostly the text of a
// message, as the surface events of a log are.
func BenchmarkParseJSONText(b *testing.B) {
	text := strings.Repeat(`a stream of words, some \"quoted\", and a line break\n. `, 40)
	line := []byte(`{"type":"user/message","seq":3,"time":1785730685958,"data":{"id":"m1","role":"user",` +
		`"content":[{"type":"text","text":"` + text + `"}],"source":{"kind":"user"}},"surfaceOp":"append"}`)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := messages.ParseJSON(line); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAccessorsSkipStringsWithBackslashRuns: the accessors find the end of
// a string whatever runs of backslashes and escaped quotes it holds.
func TestAccessorsSkipStringsWithBackslashRuns(t *testing.T) {
	pieces := []string{``, `\`, `\\`, `\\\`, `"`, `\"`, `\\"`, `"\`, `""`, `x`, `é`, "\n"}
	for _, a := range pieces {
		for _, b := range pieces {
			for _, c := range pieces {
				content := a + b + c
				lit := messages.JSONString(content).String()
				j := messages.MustParseJSON(`{"s":` + lit + `,"arr":[` + lit + `,` + lit + `],"n":1}`)
				s, ok := j.Field("s")
				require.True(t, ok)
				got, _ := s.AsString()
				require.Equal(t, content, got)
				n, _ := j.Field("n")
				require.Equal(t, "1", n.String(), "content %q", content)
				arr, _ := j.Field("arr")
				var elems []string
				for e := range arr.Elements() {
					elems = append(elems, e.String())
				}
				require.Equal(t, []string{lit, lit}, elems)
				require.Equal(t, []string{"s", "arr", "n"}, j.Keys())
			}
		}
	}
}
