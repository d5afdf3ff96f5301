package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"
)

// Latency is a distribution summary in microseconds.
type Latency struct {
	Count int     `json:"count"`
	P50us float64 `json:"p50_us"`
	P99us float64 `json:"p99_us"`
	MaxUs float64 `json:"max_us"`
}

// Report is the result of a run.
type Report struct {
	Sessions        int     `json:"sessions"`
	TurnsPerSession int     `json:"turns_per_session"`
	Policy          string  `json:"policy"`
	Dir             string  `json:"dir,omitempty"`
	Store           string  `json:"store,omitempty"` // a store other than a directory (a SQLite database)
	Interrupted     bool    `json:"interrupted,omitempty"`
	WallSeconds     float64 `json:"wall_seconds"`
	Turns           int64   `json:"turns"`
	Events          int64   `json:"events"`
	Chunks          int64   `json:"chunks"`
	EventsPerSec    float64 `json:"events_per_sec"`
	ChunksPerSec    float64 `json:"chunks_per_sec"`
	TurnsPerSec     float64 `json:"turns_per_sec"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	CPUPerChunkNs   float64 `json:"cpu_per_chunk_ns"`
	// RuntimeCPUPerChunkNs is CPUPerChunkNs net of the synthetic model's
	// own CPU per chunk at the same pace and concurrency
	// (Baselines.ProviderCPUPerChunkNs): what the runtime costs per chunk.
	// Absent without the baselines.
	RuntimeCPUPerChunkNs float64 `json:"runtime_cpu_per_chunk_ns,omitempty"`
	// TurnOverhead is the turn latency beyond the model's own.
	TurnOverhead Latency `json:"turn_overhead"`
	// TurnLatency is the whole turn, Followup to durable WaitIdle.
	TurnLatency      Latency `json:"turn_latency"`
	FlushLatency     Latency `json:"flush_latency"`
	Files            int     `json:"files"`
	FilesVerified    int     `json:"files_verified"`
	BytesOnDisk      int64   `json:"bytes_on_disk"`
	BytesRaw         int64   `json:"bytes_raw"`
	CompressionRatio float64 `json:"compression_ratio"`
	PeakHeapBytes    uint64  `json:"peak_heap_bytes"`
	HeapPerSession   float64 `json:"heap_per_session_bytes"`
	HeapPerEvent     float64 `json:"heap_per_event_bytes"`
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	WriteFailures    int64   `json:"write_failures"`
	// Resident is how many sessions were resident when the load ended, and
	// Passivated how many passivations happened (with PassivateAfter).
	Resident   int   `json:"resident"`
	Passivated int64 `json:"passivated"`
	// Members is the number of cluster members (0: one host, no cluster).
	Members int `json:"members,omitempty"`
	// OpenFDs and PeakOpenFDs are the process's open file descriptors
	// when the load ended and at most during it (sampled); FDsPerResident
	// is the descriptors the run added, at the end, per resident session.
	// All three are -1 where /proc/self/fd is missing (not Linux).
	OpenFDs        int     `json:"open_fds"`
	PeakOpenFDs    int     `json:"peak_open_fds"`
	FDsPerResident float64 `json:"fds_per_resident_session"`
	// Baselines is the same work without the runtime (nil when skipped).
	Baselines *Baselines `json:"baselines,omitempty"`
}

type samples struct {
	mu sync.Mutex
	v  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.v = append(s.v, d)
	s.mu.Unlock()
}

func (s *samples) summary() Latency {
	s.mu.Lock()
	v := slices.Clone(s.v)
	s.mu.Unlock()
	if len(v) == 0 {
		return Latency{}
	}
	slices.Sort(v)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return float64(v[max(i, 0)]) / 1e3
	}
	return Latency{Count: len(v), P50us: q(0.50), P99us: q(0.99), MaxUs: float64(v[len(v)-1]) / 1e3}
}

// WriteTable prints the report as a table.
func WriteTable(w io.Writer, r Report) {
	row := func(k, format string, args ...any) { fmt.Fprintf(w, "%-28s %s\n", k, fmt.Sprintf(format, args...)) }
	us := func(l Latency) string {
		if l.Count == 0 {
			return "-"
		}
		return fmt.Sprintf("p50 %s  p99 %s  max %s  (n=%d)", dur(l.P50us), dur(l.P99us), dur(l.MaxUs), l.Count)
	}
	if r.Interrupted {
		row("status", "INTERRUPTED (partial results)")
	}
	row("sessions", "%d × %d turns", r.Sessions, r.TurnsPerSession)
	row("policy", "%s", r.Policy)
	if r.Members > 0 {
		row("cluster", "%d members on 127.0.0.1, one shared directory", r.Members)
	}
	row("wall time", "%.2fs", r.WallSeconds)
	row("turns", "%d  (%.0f/s)", r.Turns, r.TurnsPerSec)
	row("events", "%d  (%.0f/s)", r.Events, r.EventsPerSec)
	row("chunks", "%d  (%.0f/s)", r.Chunks, r.ChunksPerSec)
	row("CPU", "%.2fs  (%.2f µs per chunk)", r.CPUSeconds, r.CPUPerChunkNs/1e3)
	row("turn latency", "%s", us(r.TurnLatency))
	row("turn beyond model", "%s", us(r.TurnOverhead))
	row("turn-end flush", "%s", us(r.FlushLatency))
	if r.Store != "" {
		row("on disk", "%s in %s (%d sessions, %d verified), %s as JSONL, ratio %.1f×",
			bytesStr(float64(r.BytesOnDisk)), r.Store, r.Files, r.FilesVerified, bytesStr(float64(r.BytesRaw)), r.CompressionRatio)
	} else if r.Files > 0 {
		row("on disk", "%s in %d files (%d verified), %s raw, ratio %.1f×",
			bytesStr(float64(r.BytesOnDisk)), r.Files, r.FilesVerified, bytesStr(float64(r.BytesRaw)), r.CompressionRatio)
	} else {
		row("on disk", "nothing (memory only)")
	}
	row("peak heap", "%s", bytesStr(float64(r.PeakHeapBytes)))
	row("heap after load", "%s per session, %.0f B per event", bytesStr(r.HeapPerSession), r.HeapPerEvent)
	if r.OpenFDs >= 0 {
		per := "-"
		if r.FDsPerResident >= 0 {
			per = fmt.Sprintf("%.2f", r.FDsPerResident)
		}
		row("open files", "%d at the end of the load (peak %d); %s added per resident session (%d resident)",
			r.OpenFDs, r.PeakOpenFDs, per, r.Resident)
	}
	if r.Passivated > 0 {
		row("passivation", "%d passivations, %d of %d sessions resident at the end", r.Passivated, r.Resident, r.Sessions)
	}
	row("tokens", "%d in, %d out", r.InputTokens, r.OutputTokens)
	if r.WriteFailures > 0 {
		row("write failures", "%d (retried)", r.WriteFailures)
	}
	if b := r.Baselines; b != nil {
		ratio := func(a, base float64) string {
			if base <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f×", a/base)
		}
		fmt.Fprintln(w, "baselines (same process)")
		if b.MutexLogEventsPerSec > 0 {
			row("  mutex-guarded log", "%.0f events/s (the runtime did %s of it, end to end)", b.MutexLogEventsPerSec, ratio(r.EventsPerSec, b.MutexLogEventsPerSec))
			row("  JSON encoding alone", "%.0f events/s (the runtime did %s of it)", b.EncodeEventsPerSec, ratio(r.EventsPerSec, b.EncodeEventsPerSec))
			row("  raw write+fsync per turn", "%.0f/s, %s (turn-end flush p99 is %s of raw p99)", b.RawFsyncPerSec, us(b.RawFsync), ratio(r.FlushLatency.P99us, b.RawFsync.P99us))
		}
		row("  synthetic model alone", "%.2f µs CPU per chunk (the runtime's own: %.2f µs per chunk)", b.ProviderCPUPerChunkNs/1e3, r.RuntimeCPUPerChunkNs/1e3)
	}
}

func dur(us float64) string {
	return time.Duration(us * 1e3).Round(time.Microsecond).String()
}

func bytesStr(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
