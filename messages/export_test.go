package messages

// The parsers the package's external tests exercise on their own; outside
// the package a source or a finish reason is read as part of the message
// or the stream chunk that holds it.
var (
	ParseSource       = parseSource
	ParseFinishReason = parseFinishReason
)
