package persister

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/quick"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestProjectKey(t *testing.T) {
	for _, c := range []struct{ cwd, want string }{
		{"", "_no-cwd"},
		{"/", "--root--"},
		{"///", "--root--"},
		{"/home/user/project", "--home-user-project--"},
		{"/home//user/", "--home-user---"},
		{`C:\Users\me\code`, "--C-Users-me-code--"},
		{`C:/mixed\seps:here`, "--C-mixed-seps-here--"},
		{"/a:/b", "--a-b--"}, // a run of mixed separators is one "-"
		{"/a-/b", "--a--b--"},
		{"/-leading", "--leading--"},
		{"/work/my project", "--work-my~0020project--"},
		{"/tmp/a.b_c-d", "--tmp-a.b_c-d--"},
		{"/tmp/~x", "--tmp-~007Ex--"},
		{"/tmp/é", "--tmp-~00E9--"},
		{"/tmp/😀", "--tmp-~D83D~DE00--"}, // UTF-16 code units
		{"/tmp/\xff", "--tmp-~DCFF--"},   // a byte that is not UTF-8
	} {
		require.Equal(t, c.want, projectKey(c.cwd), "cwd %q", c.cwd)
	}
	long := "/" + strings.Repeat("x", 300)
	require.Equal(t, "--"+strings.Repeat("x", 251)+"--", projectKey(long), "the slug is cut to 251")
	require.Len(t, projectKey("/"+strings.Repeat("é", 100)), 2+251+2)
}

func TestEncodeSegment(t *testing.T) {
	for _, c := range []struct{ id, want string }{
		{"abc-DEF_0.9", "abc-DEF_0.9"},
		{".", "~002E"},
		{"..", "~002E~002E"},
		{"...", "..."},
		{"a.b", "a.b"},
		{"~002E", "~007E002E"},
		{"a/b", "a~002Fb"},
		{`a\b`, "a~005Cb"},
		{"a:b", "a~003Ab"},
		{"sp ace", "sp~0020ace"},
		{"é", "~00E9"},
		{"😀", "~D83D~DE00"},
		{"\x00", "~0000"},
		{"\xff\xfe", "~DCFF~DCFE"},
		{"\uFFFD", "~FFFD"},
	} {
		require.Equal(t, c.want, EncodeSegment(c.id), "id %q", c.id)
	}
}

// decodeSegment inverts EncodeSegment; it exists to prove injectivity:
// an encoding with an inverse cannot map two ids to one name.
func decodeSegment(seg string) (string, bool) {
	switch seg {
	case "~002E":
		return ".", true
	case "~002E~002E":
		return "..", true
	}
	var units []uint16
	for i := 0; i < len(seg); {
		if seg[i] != '~' {
			units = append(units, uint16(seg[i]))
			i++
			continue
		}
		if i+5 > len(seg) {
			return "", false
		}
		u, err := strconv.ParseUint(seg[i+1:i+5], 16, 16)
		if err != nil || strings.ToUpper(seg[i+1:i+5]) != seg[i+1:i+5] {
			return "", false
		}
		units = append(units, uint16(u))
		i += 5
	}
	var b []byte
	for i := 0; i < len(units); i++ {
		u := units[i]
		switch {
		case utf16.IsSurrogate(rune(u)) && u < 0xDC00 && i+1 < len(units):
			b = utf8.AppendRune(b, utf16.DecodeRune(rune(u), rune(units[i+1])))
			i++
		case u >= 0xDC80 && u <= 0xDCFF:
			b = append(b, byte(u))
		default:
			b = utf8.AppendRune(b, rune(u))
		}
	}
	return string(b), true
}

func TestEncodeSegmentIsInjective(t *testing.T) {
	check := func(id string) bool {
		seg := EncodeSegment(id)
		got, ok := decodeSegment(seg)
		return ok && got == id && validSegment(seg)
	}
	require.NoError(t, quick.Check(check, &quick.Config{MaxCount: 5000}))

	// Random byte strings, invalid UTF-8 and unsafe characters included.
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "0", ".", "-", "_", "~", "/", `\`, ":", " ", "é", "😀", "\xff", "\xed\xa0\x80", "\uFFFD", "~0041"}
	seen := map[string]string{}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(6) + 1 {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		id := b.String()
		require.True(t, check(id), "id %q", id)
		seg := EncodeSegment(id)
		if prev, ok := seen[seg]; ok {
			require.Equal(t, prev, id, "two ids share %q", seg)
		}
		seen[seg] = id
	}
}

// validSegment reports whether seg is a safe directory name: only
// [A-Za-z0-9._~-], not "." or "..".
func validSegment(seg string) bool {
	if seg == "." || seg == ".." {
		return false
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._~-", c) >= 0) {
			return false
		}
	}
	return true
}

func FuzzEncodeSegment(f *testing.F) {
	for _, s := range []string{"", ".", "..", "~", "a/b", "\xff", "😀", "~002E"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		seg := EncodeSegment(id)
		got, ok := decodeSegment(seg)
		if !ok || got != id {
			t.Fatalf("EncodeSegment(%q) = %q decodes to %q, %v", id, seg, got, ok)
		}
		if id != "" && !validSegment(seg) {
			t.Fatalf("EncodeSegment(%q) = %q is not a safe name", id, seg)
		}
		key := projectKey(id)
		if !validSegment(key) || len(key) > 255 {
			t.Fatalf("projectKey(%q) = %q is not a safe name", id, key)
		}
	})
}
