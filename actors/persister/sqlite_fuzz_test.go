package persister

import (
	"bytes"
	"testing"

	"github.com/dshgo/dsh/actors/session"
)

// FuzzSQLiteRowDecoders feeds arbitrary bytes to the decoders of what a
// foreign writer controls in a SQLite store: the provenance varints, a
// packed row's data (as TEXT and as a zstd BLOB) and a scalar row's data.
// Nothing may panic; a provenance BLOB that decodes re-encodes to itself
// (the encoding is canonical); a packed row that decodes is 3..1024
// assistant/chunk events with contiguous seqs from the row's seq.
//
// Run it with -fuzzminimizetime=10x (the default minimisation can spend a
// minute on one input):
//
//	go test -run '^$' -fuzz FuzzSQLiteRowDecoders -fuzztime 30s -fuzzminimizetime=10x ./actors/persister/
func FuzzSQLiteRowDecoders(f *testing.F) {
	f.Add([]byte{0xAC, 0x02, 0xCF, 0x04, 0xB0, 0x17, 0xB3, 0x17}, uint8(0))
	f.Add([]byte(`{"turn":1,"step":1,"index":0,"dt":[2,-1],"texts":["a","b","c"]}`), uint8(0))
	f.Add([]byte(`{"turn":1,"step":2,"index":1,"dt":[0,1],"id":"call_1","name":"bash","args":["","{","\""]}`), uint8(2))
	f.Add([]byte(`{"turn":1,"step":1,"index":0,"dt":[0,0],"id":"c","args":["a","b","c"]}`), uint8(5))
	f.Add([]byte(`{"turn":1}`), uint8(3))
	f.Add([]byte{0x80, 0x00}, uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, mode uint8) {
		if seqs, err := decodeSources(b); err == nil {
			enc, err := appendSources(nil, seqs)
			if err != nil || !bytes.Equal(enc, b) {
				t.Fatalf("provenance % X decodes to %v, which encodes to % X (%v)", b, seqs, enc, err)
			}
		}
		tags := []string{sqlTagText, sqlTagReasoning, sqlTagToolCall}
		var data any = string(b)
		if mode&4 != 0 {
			data = sqlEncoder().EncodeAll(b, nil)
		}
		r := sqlRow{seq: int64(mode) * 1000, time: int64(mode) - 100, typ: tags[int(mode)%3], data: data, ignorable: 0}
		evs, err := decodeSQLRow(nil, r)
		if err == nil {
			if len(evs) < sqlMinPacked || len(evs) > sqlMaxPacked {
				t.Fatalf("a packed row decoded to %d events", len(evs))
			}
			for i, e := range evs {
				if e.Seq() != r.seq+int64(i) || e.Type() != session.TypeAssistantChunk {
					t.Fatalf("member %d is %s at seq %d", i, e.Type(), e.Seq())
				}
			}
		}
		// The same bytes as a scalar row's data, of a core and of a
		// foreign type.
		for _, typ := range []string{"turn/start", "plugin/note"} {
			evs, err := decodeSQLRow(nil, sqlRow{seq: 7, typ: typ, data: data, ignorable: 1, sources: b})
			if err == nil && (len(evs) != 1 || evs[0].Seq() != 7) {
				t.Fatalf("a scalar row decoded to %d events", len(evs))
			}
		}
	})
}
