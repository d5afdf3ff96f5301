package telemetry

import (
	"context"
	"log/slog"
)

// DebugHandler returns a handler that passes every record to h at debug
// level, whatever level it was made at: for a library's own logging
// (protoactor's) that should appear only when the user asked for debug
// output. It is safe for concurrent use if h is.
func DebugHandler(h slog.Handler) slog.Handler { return debugHandler{h} }

type debugHandler struct{ h slog.Handler }

func (d debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}

func (d debugHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return debugHandler{d.h.WithAttrs(as)}
}

func (d debugHandler) WithGroup(name string) slog.Handler {
	return debugHandler{d.h.WithGroup(name)}
}
