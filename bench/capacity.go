package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dshgo/dsh/actors/persister"
)

// Capacity defaults: the pace and the limits a step must hold to.
const (
	DefaultCapacityStart   = 100
	DefaultCapacityTPS     = 30.0
	DefaultCapacityChunks  = 100
	DefaultCapacityTimeout = 5 * time.Minute
	// CapacityFlushP99 is the most a step's turn-end flush p99 may be.
	CapacityFlushP99 = 10 * time.Millisecond
	// CapacityOverheadP99 is the most a step's turn latency beyond the
	// model's own may be at p99.
	CapacityOverheadP99 = 50 * time.Millisecond
)

// ErrCapacityTimeout is the cause of the context a capacity search runs
// under when its time is up.
var ErrCapacityTimeout = errors.New("bench: capacity timeout")

// ErrNoStepCompleted is returned by Capacity when its time ran out before
// a single step finished.
var ErrNoStepCompleted = errors.New("bench: no capacity step completed within the timeout")

// CapacityOptions are the knobs of a capacity search. Zero fields take
// the defaults.
type CapacityOptions struct {
	// Load is each step's load. Its Sessions is the first step's count
	// (default DefaultCapacityStart); Turns is forced to one turn per
	// session; TokensPerSecond defaults to DefaultCapacityTPS and Chunks to
	// DefaultCapacityChunks; the baselines, the verification and the
	// per-step progress are off.
	Load Options
	// MemoryBudget is the most live heap a step may reach (default: half
	// the machine's total memory). A step seen above it is stopped
	// at once (Options.HeapLimit) and did not hold.
	MemoryBudget uint64
	// Timeout bounds the whole search (default DefaultCapacityTimeout);
	// a step running when it expires does not count.
	Timeout time.Duration
	// Progress receives one line per step (nil: none).
	Progress io.Writer
}

// CapacityStep is one step of the search: a load of Sessions concurrent
// sessions, one turn each.
type CapacityStep struct {
	Sessions        int     `json:"sessions"`
	Held            bool    `json:"held"`
	Broke           string  `json:"broke,omitempty"` // which limit, when it did not hold
	FlushP99us      float64 `json:"flush_p99_us"`
	OverheadP99us   float64 `json:"turn_beyond_model_p99_us"`
	PeakHeapBytes   uint64  `json:"peak_heap_bytes"`
	HeapPerSession  float64 `json:"heap_per_session_bytes"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	WallSeconds     float64 `json:"wall_seconds"`
	FDsPerSession   float64 `json:"fds_per_session"`
	CPUCoresPerSess float64 `json:"cpu_cores_per_session"`
}

// CapacityReport is the result of a capacity search.
type CapacityReport struct {
	// CapacitySessions is the largest count that held (0: none did).
	CapacitySessions int     `json:"capacity_sessions"`
	TokensPerSecond  float64 `json:"tokens_per_second"`
	Chunks           int     `json:"chunks_per_turn"`
	Policy           string  `json:"policy"`
	MemoryBudget     uint64  `json:"memory_budget_bytes"`
	FlushP99Limitus  float64 `json:"flush_p99_limit_us"`
	OverheadLimitus  float64 `json:"turn_beyond_model_p99_limit_us"`
	// At is the step that held at CapacitySessions (nil when none did):
	// its CPU (cores busy per session), heap and descriptors per session.
	At          *CapacityStep  `json:"at,omitempty"`
	Steps       []CapacityStep `json:"steps"`
	TimedOut    bool           `json:"timed_out,omitempty"`
	WallSeconds float64        `json:"wall_seconds"`
}

// capacityLimits are what a step must hold to. A zero flushP99 checks no
// flush (a run without durability flushes nothing).
type capacityLimits struct {
	flushP99, overheadP99 time.Duration
	heap                  uint64
}

// judge says whether a step's report held the limits, and if not which
// limit it broke.
func (l capacityLimits) judge(r Report) (bool, string) {
	var broke []string
	if l.flushP99 > 0 {
		if r.FlushLatency.Count == 0 {
			broke = append(broke, "no turn end was flushed")
		} else if d := time.Duration(r.FlushLatency.P99us * 1e3); d > l.flushP99 {
			broke = append(broke, fmt.Sprintf("flush p99 %s > %s", d.Round(10*time.Microsecond), l.flushP99))
		}
	}
	if d := time.Duration(r.TurnOverhead.P99us * 1e3); d > l.overheadP99 {
		broke = append(broke, fmt.Sprintf("turn beyond model p99 %s > %s", d.Round(10*time.Microsecond), l.overheadP99))
	}
	if r.PeakHeapBytes > l.heap {
		broke = append(broke, fmt.Sprintf("peak heap %s > budget %s", bytesStr(float64(r.PeakHeapBytes)), bytesStr(float64(l.heap))))
	}
	if r.WriteFailures > 0 {
		broke = append(broke, fmt.Sprintf("%d write failures", r.WriteFailures))
	}
	return len(broke) == 0, strings.Join(broke, ", ")
}

// ramp finds the largest count for which step holds: it tries start, then
// doubles while the step holds; after the first count that does not hold
// it bisects between the largest that held and the smallest that did not
// until they are within 10 % of each other (or one apart). It returns the
// largest count that held (0 if none did). An error from step ends the
// search at once, with the best count so far.
func ramp(start int, step func(n int) (bool, error)) (int, error) {
	start = max(start, 1)
	held, failed := 0, 0 // failed 0: no count has failed yet
	for n := start; failed == 0; n *= 2 {
		ok, err := step(n)
		if err != nil {
			return held, err
		}
		if ok {
			held = n
		} else {
			failed = n
		}
		if n > math.MaxInt/2 {
			return held, nil // held all the way: no count left to double to
		}
	}
	for failed-held > 1 && float64(failed-held) > 0.1*float64(held) {
		n := held + (failed-held)/2
		ok, err := step(n)
		if err != nil {
			return held, err
		}
		if ok {
			held = n
		} else {
			failed = n
		}
	}
	return held, nil
}

// Capacity searches for the largest number of concurrent sessions one
// process holds at a model's pace (see ramp and capacityLimits): each step
// is a Run of that many sessions, one turn each, their starts spread over
// one turn's model time (Options.Stagger), with turn-end durability
// unless the load says otherwise, on a fresh host and directory (with
// Load.Dir, a subdirectory of it per step, kept; with Load.Store, a
// database per step beside it, named after the step). A
// cancelled ctx ends the search with what it found and the cause; the
// timeout ends it with what it found, TimedOut, and no error (unless no
// step completed: ErrNoStepCompleted).
func Capacity(ctx context.Context, co CapacityOptions) (CapacityReport, error) {
	o := co.Load
	start := o.Sessions
	if start <= 0 {
		start = DefaultCapacityStart
	}
	o.Turns = 1
	if o.TokensPerSecond == 0 {
		o.TokensPerSecond = DefaultCapacityTPS
	}
	if o.Chunks == 0 {
		o.Chunks = DefaultCapacityChunks
	}
	o.NoBaselines, o.NoVerify, o.Progress, o.CPUProfile = true, true, nil, nil
	// A steady load: the sessions' turns start spread over one turn's
	// model time, so that their turn ends are too.
	o.Stagger = time.Duration(float64(o.Chunks) / o.TokensPerSecond * float64(time.Second))
	o.Sessions = start
	if err := o.Validate(); err != nil {
		return CapacityReport{}, err
	}
	timeout := co.Timeout
	if timeout <= 0 {
		timeout = DefaultCapacityTimeout
	}
	budget := co.MemoryBudget
	if budget == 0 {
		m, err := machineMemory()
		if err != nil {
			return CapacityReport{}, fmt.Errorf("bench: no memory budget given and %w", err)
		}
		budget = m / 2
	}
	lim := capacityLimits{flushP99: CapacityFlushP99, overheadP99: CapacityOverheadP99, heap: budget}
	rep := CapacityReport{TokensPerSecond: o.TokensPerSecond, Chunks: o.Chunks, Policy: o.Policy.String(),
		MemoryBudget: budget, FlushP99Limitus: float64(lim.flushP99) / 1e3, OverheadLimitus: float64(lim.overheadP99) / 1e3}
	if o.Policy == persister.PolicyNone {
		lim.flushP99, rep.FlushP99Limitus = 0, 0
	}
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, ErrCapacityTimeout)
	defer cancel()
	began := time.Now()
	best, err := ramp(start, func(n int) (bool, error) {
		so := o
		so.Sessions = n
		// Each step's sessions in a directory (or a database) of their
		// own, kept.
		suffix := fmt.Sprintf("step%02d-%d", len(rep.Steps)+1, n)
		if o.Dir != "" {
			so.Dir = filepath.Join(o.Dir, suffix)
		}
		if o.Store != "" {
			loc, err := persister.ParseStoreURL(o.Store)
			if err != nil {
				return false, err
			}
			loc.Path += "." + suffix
			so.Store = loc.String()
		}
		so.HeapLimit = budget
		r, err := Run(tctx, so)
		overBudget := errors.Is(err, ErrHeapLimit) && tctx.Err() == nil
		if err != nil && !overBudget {
			if cause := context.Cause(tctx); cause != nil {
				return false, cause
			}
			return false, fmt.Errorf("bench: capacity step of %d sessions: %w", n, err)
		}
		ok, broke := lim.judge(r)
		if overBudget {
			// Stopped at once rather than run out of memory.
			ok, broke = false, fmt.Sprintf("heap over budget %s (step stopped)", bytesStr(float64(budget)))
		}
		st := CapacityStep{Sessions: n, Held: ok, Broke: broke, FlushP99us: r.FlushLatency.P99us,
			OverheadP99us: r.TurnOverhead.P99us, PeakHeapBytes: r.PeakHeapBytes, HeapPerSession: r.HeapPerSession,
			CPUSeconds: r.CPUSeconds, WallSeconds: r.WallSeconds, FDsPerSession: r.FDsPerResident}
		if r.WallSeconds > 0 {
			st.CPUCoresPerSess = r.CPUSeconds / r.WallSeconds / float64(n)
		}
		rep.Steps = append(rep.Steps, st)
		if co.Progress != nil {
			verdict := "held"
			if !ok {
				verdict = "did not hold"
			}
			fmt.Fprintf(co.Progress, "capacity: %d sessions %s: flush p99 %s, beyond model p99 %s, peak heap %s, %.2f cores [%.0fs]\n",
				n, verdict, dur(st.FlushP99us), dur(st.OverheadP99us), bytesStr(float64(st.PeakHeapBytes)),
				st.CPUSeconds/max(st.WallSeconds, 1e-9), time.Since(began).Seconds())
		}
		return ok, nil
	})
	rep.WallSeconds = time.Since(began).Seconds()
	rep.CapacitySessions = best
	for i := range rep.Steps {
		if rep.Steps[i].Held && rep.Steps[i].Sessions == best {
			rep.At = &rep.Steps[i]
		}
	}
	if errors.Is(err, ErrCapacityTimeout) && ctx.Err() == nil {
		rep.TimedOut = true
		if len(rep.Steps) == 0 {
			return rep, ErrNoStepCompleted
		}
		return rep, nil
	}
	return rep, err
}

// machineMemory is the machine's total memory (Linux: MemTotal of
// /proc/meminfo).
func machineMemory() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("the machine's memory is unknown: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "MemTotal" {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 2 && fields[1] == "kB" {
			if n, err := strconv.ParseUint(fields[0], 10, 64); err == nil && n > 0 {
				return n << 10, nil
			}
		}
		break
	}
	return 0, errors.New("the machine's memory is unknown: no MemTotal in /proc/meminfo")
}

// WriteCapacity prints a capacity report.
func WriteCapacity(w io.Writer, r CapacityReport) {
	row := func(k, format string, args ...any) { fmt.Fprintf(w, "%-28s %s\n", k, fmt.Sprintf(format, args...)) }
	if r.TimedOut {
		row("status", "stopped at the timeout (%.0fs); the largest count that held so far", r.WallSeconds)
	}
	row("sessions per process", "%d", r.CapacitySessions)
	row("load", "%g tokens/s, %d chunks a turn, one turn per session per step, policy %s", r.TokensPerSecond, r.Chunks, r.Policy)
	row("limits", "turn-end flush p99 ≤ %s, turn beyond model p99 ≤ %s, heap ≤ %s",
		dur(r.FlushP99Limitus), dur(r.OverheadLimitus), bytesStr(float64(r.MemoryBudget)))
	if s := r.At; s != nil {
		fds := "-"
		if s.FDsPerSession >= 0 {
			fds = fmt.Sprintf("%.2f", s.FDsPerSession)
		}
		row("per session at that count", "%.4f cores of CPU, %s of heap (peak %s in all), %s open files",
			s.CPUCoresPerSess, bytesStr(s.HeapPerSession), bytesStr(float64(s.PeakHeapBytes)), fds)
	}
	for _, s := range r.Steps {
		verdict := fmt.Sprintf("held (flush p99 %s, beyond model p99 %s)", dur(s.FlushP99us), dur(s.OverheadP99us))
		if !s.Held {
			verdict = "did not hold: " + s.Broke
		}
		row(fmt.Sprintf("  %d sessions", s.Sessions), "%s", verdict)
	}
	row("wall time", "%.1fs", r.WallSeconds)
}
