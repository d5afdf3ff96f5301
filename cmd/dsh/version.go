package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

const versionUsage = `Usage: dsh version (or dsh --version)

Prints dsh's module version and the VCS revision it was built from: "(devel)"
for a build outside a released module, and no revision when the build
recorded none (VCS stamping turned off, or a build outside a repository).
`

// versionCmd is `dsh version` and `dsh --version`.
func versionCmd(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("version")
	if err := parseFlags(fs, args, versionUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version: unexpected argument %q", fs.Arg(0))
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	_, err := fmt.Fprintln(stdout, versionLine(info))
	return err
}

// versionLine renders the build info: "dsh VERSION", then " rev REVISION"
// when the build recorded one, with ", modified" when the working tree
// had changes. A nil info, or one without a version, is "(devel)".
func versionLine(info *debug.BuildInfo) string {
	version := "(devel)"
	if info != nil && info.Main.Version != "" {
		version = info.Main.Version
	}
	line := "dsh " + version
	if info == nil {
		return line
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		line += " rev " + rev
		if modified == "true" {
			line += ", modified"
		}
	}
	return line
}
