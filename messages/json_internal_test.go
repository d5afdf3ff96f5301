package messages

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"unicode/utf8"
)

// TestPlainRunFindsTheFirstByteToLookAt: the eight-bytes-at-a-time scan
// stops where the byte-at-a-time one does, at every offset of strings
// made of plain ASCII with a few bytes of each kind a string scan must
// see.
func TestPlainRunFindsTheFirstByteToLookAt(t *testing.T) {
	naive := func(b []byte, i int) int {
		for ; i < len(b); i++ {
			if c := b[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				return i
			}
		}
		return i
	}
	special := []byte{0, 0x1f, '"', '\\', 0x7f, 0x80, 0xc3, 0xff, ' ', '!', '#', '[', ']', 0x21, 0x5b, 0x5d}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 50000 {
		b := make([]byte, rng.IntN(40))
		for k := range b {
			b[k] = byte(0x20 + rng.IntN(0x5f))
		}
		for range rng.IntN(3) {
			if len(b) > 0 {
				b[rng.IntN(len(b))] = special[rng.IntN(len(special))]
			}
		}
		for i := 0; i <= len(b); i++ {
			if got, want := plainRun(b, i), naive(b, i); got != want {
				t.Fatalf("plainRun(%q, %d) = %d, want %d", b, i, got, want)
			}
		}
	}
}

// TestAsIntShortcutAgreesWithStrconv: the digit loop AsInt tries first
// reads what strconv reads, and leaves to it what it cannot read.
func TestAsIntShortcutAgreesWithStrconv(t *testing.T) {
	viaStrconv := func(s string) (int64, bool) {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			if n > maxSafeInt || n < -maxSafeInt {
				return 0, false
			}
			return n, true
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > maxSafeInt {
			return 0, false
		}
		return int64(f), true
	}
	lits := []string{"0", "1", "-1", "9", "10", "999999999999999", "-999999999999999", "1000000000000000",
		"9007199254740991", "-9007199254740991", "9007199254740992", "12345678901234567890", "1.0", "1e2",
		"-1.5", "0.0", "1E15"}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 10000 {
		n := rng.Int64N(1<<62) >> rng.IntN(62)
		if rng.IntN(2) == 0 {
			n = -n
		}
		lits = append(lits, strconv.FormatInt(n, 10))
	}
	for _, lit := range lits {
		j, err := ParseJSONString(lit)
		if err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		gotN, gotOK := j.AsInt()
		wantN, wantOK := viaStrconv(lit)
		if gotN != wantN || gotOK != wantOK {
			t.Fatalf("AsInt(%s) = %d, %v; strconv reads %d, %v", lit, gotN, gotOK, wantN, wantOK)
		}
	}
}

func TestStringArray(t *testing.T) {
	if got := stringArray(nil).String(); got != `[]` {
		t.Fatalf("stringArray(nil) = %s, want []", got)
	}
	if got := stringArray([]string{"a", `"`, ""}).String(); got != `["a","\"",""]` {
		t.Fatalf(`stringArray(a, ", "") = %s`, got)
	}
}
