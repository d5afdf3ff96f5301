package main

import (
	"context"
	"fmt"
	"io"

	"github.com/dshgo/dsh/actors/agent/logreplay"
	"github.com/dshgo/dsh/internal/fixtures"
)

// logReplay is `dsh log replay [--fixture] FILE` (docs/replay.md): it re-runs
// the recorded session through dsh's own loop and prints "conformant"
// (exit 0), or the first divergence (exit 1).
func logReplay(args []string, stdout, _ io.Writer) error {
	fixture, path, err := oneFile("replay", args, stdout)
	if err != nil {
		return err
	}
	load := logreplay.Load
	if fixture {
		load = logreplay.LoadFixture
	}
	rec, override, err := load(path)
	if err != nil {
		if !fixture {
			if fixtures.HasPlaceholders(filePrefix(path)) {
				return fmt.Errorf("%v (the file has reference snapshot placeholders: try --fixture)", describe(path, err))
			}
		}
		return describe(path, err)
	}
	res, err := logreplay.Run(context.Background(), rec, logreplay.Options{Override: override})
	if err != nil {
		return fmt.Errorf("%s: replay: %v", path, err)
	}
	if res.Conformant {
		_, err := fmt.Fprintln(stdout, "conformant")
		return err
	}
	if _, err := fmt.Fprintln(stdout, visibleText(res.Divergence.String())); err != nil {
		return err
	}
	return errReported
}
