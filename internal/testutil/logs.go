package testutil

import (
	"context"
	"log/slog"
	"sync"
)

// LogRecords is a slog.Handler that keeps every record it is given, so a
// test can check what was logged: slog.New(&LogRecords{}). Attributes
// added with WithAttrs and groups are dropped; a record's own attributes
// are kept. Safe for concurrent use.
type LogRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

// Enabled keeps every level.
func (r *LogRecords) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps a copy of rec.
func (r *LogRecords) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.records = append(r.records, rec.Clone())
	r.mu.Unlock()
	return nil
}

// WithAttrs returns r: the attributes are dropped.
func (r *LogRecords) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns r: the group is dropped.
func (r *LogRecords) WithGroup(string) slog.Handler { return r }

// AtLevel returns the records kept so far at level, in the order logged.
func (r *LogRecords) AtLevel(level slog.Level) []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Record
	for _, rec := range r.records {
		if rec.Level == level {
			out = append(out, rec)
		}
	}
	return out
}

// Attr returns the value of rec's attribute key as a string, "" when rec
// has none.
func Attr(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}
