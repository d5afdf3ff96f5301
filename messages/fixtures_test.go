package messages_test

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
)

// TestHarnessFixturesRoundTrip reads every line of every session log the
// reference wrote and requires that each message it carries imports and
// encodes back to the same JSON, and each stream chunk parses and encodes
// back the same.
func TestHarnessFixturesRoundTrip(t *testing.T) {
	files, err := fixtures.CorpusFiles()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 65, "the corpus has 65 .jsonl files")

	var nMessages, nChunks, nBlocks, nLines int
	sourceKinds := map[messages.SourceKind]bool{}
	chunkTypes := map[messages.ChunkType]bool{}
	for _, path := range files {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		sc := bufio.NewScanner(bytes.NewReader(fixtures.Substitute(data)))
		sc.Buffer(nil, 64<<20)
		for lineNo := 1; sc.Scan(); lineNo++ {
			text := sc.Text()
			if strings.TrimSpace(text) == "" {
				continue
			}
			nLines++
			where := func(what string) string { return path + ":" + itoa(lineNo) + ": " + what }

			line, err := messages.ParseJSONString(text)
			require.NoError(t, err, where("line is not lossless JSON"))
			require.Equal(t, text, line.String(), where("the reference writes compact JSON, kept byte for byte"))

			typ, ok := field(line, "type").AsString()
			require.True(t, ok, where("no type"))
			if typ == "session" || strings.HasSuffix(typ, "-chunks") {
				continue // the header, and packed chunk rows (another package unpacks them)
			}
			data := field(line, "data")

			var msgs []messages.JSON
			switch typ {
			case "user/message":
				msgs = append(msgs, data)
			case "assistant/message", "tool/result":
				msgs = append(msgs, field(data, "message"))
			case "agent/inbox/spliced":
				for m := range field(data, "inserted").Elements() {
					msgs = append(msgs, m)
				}
			case "assistant/chunk":
				in := field(data, "chunk")
				c, err := messages.ParseStreamChunk(in)
				require.NoError(t, err, where("chunk"))
				require.Equal(t, in, c.JSON(), where("chunk round trip"))
				require.True(t, in.Equal(c.JSON()))
				if c.Type() == messages.ChunkBlockEnd {
					require.Equal(t, field(in, "block"), c.Block().JSON(), where("block-end block"))
				}
				chunkTypes[c.Type()] = true
				nChunks++
			}
			for _, in := range msgs {
				require.False(t, in.IsZero(), where("no message"))
				m, err := messages.ImportMessage(in)
				require.NoError(t, err, where("message"))
				require.True(t, m.JSON().Equal(in), where("message round trip"))
				require.Equal(t, in, m.JSON(), where("message kept byte for byte"))
				src, err := messages.ParseSource(field(in, "source"))
				require.NoError(t, err, where("source"))
				require.Equal(t, m.Source().JSON(), src.JSON())
				sourceKinds[m.Source().Kind()] = true
				i := 0
				for b := range field(in, "content").Elements() {
					pb, err := messages.ParseContentBlock(b)
					require.NoError(t, err, where("block"))
					require.Equal(t, b, pb.JSON())
					require.True(t, m.Block(i).Equal(pb))
					i++
					nBlocks++
				}
				require.Equal(t, m.NumBlocks(), i)
				nMessages++
			}
		}
		require.NoError(t, sc.Err(), path)
	}
	t.Logf("%d files, %d lines: %d messages (%d blocks), %d chunks", len(files), nLines, nMessages, nBlocks, nChunks)

	// The walk really covered the corpus.
	require.Greater(t, nMessages, 450)
	require.Greater(t, nChunks, 800)
	for _, k := range []messages.SourceKind{messages.SourceUser, messages.SourceModel, messages.SourceTool,
		messages.SourcePlugin, "agent-instructions", "skill-catalog", "subagent-settled", "subagent-report"} {
		require.True(t, sourceKinds[k], "source kind %s seen", k)
	}
	for _, c := range []messages.ChunkType{messages.ChunkBlockStart, messages.ChunkTextDelta, messages.ChunkReasoningDelta,
		messages.ChunkToolCallDelta, messages.ChunkBlockEnd, messages.ChunkUsage, messages.ChunkFinish} {
		require.True(t, chunkTypes[c], "chunk type %s seen", c)
	}
}

func field(j messages.JSON, key string) messages.JSON {
	v, _ := j.Field(key)
	return v
}

func itoa(n int) string { return strconv.Itoa(n) }
