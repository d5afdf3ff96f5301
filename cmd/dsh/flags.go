package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"
)

// newFlagSet returns a flag set named "dsh <command>" that prints nothing
// itself: parseFlags reports.
func newFlagSet(command string) *flag.FlagSet {
	fs := flag.NewFlagSet("dsh "+command, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args with fs, then fills every flag the command line
// did not set from its environment variable (envName). --help prints
// usage and the flags on stdout and returns errHelp (exit 0); a bad flag,
// on the command line or in the environment, is bad usage (exit 2), named
// after the command.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) error {
	if err := parseCommandLine(fs, args, usage, stdout); err != nil {
		return err
	}
	return flagsFromEnv(fs, os.LookupEnv, nil)
}

// parseCommandLine is parseFlags without the environment: for a command
// that decides, from its arguments, which variables apply (flagsFromEnv's
// skip).
func parseCommandLine(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) error {
	err := fs.Parse(args)
	if p, ok := stdout.(*flagProbe); ok {
		p.fs = fs
		return errHelp
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		printFlags(stdout, fs)
		return errHelp
	}
	if err != nil {
		return usagef("%s: %s", strings.TrimPrefix(fs.Name(), "dsh "), twoDashes.ReplaceAllString(err.Error(), "$1--$2"))
	}
	return nil
}

// twoDashes finds the flag the flag package names in its errors, which it
// spells -name: dsh spells it --name, as its help does.
var twoDashes = regexp.MustCompile(`^((?:flag provided but not defined|flag needs an argument): |invalid boolean value "[^"]*" for |invalid value "[^"]*" for flag )-([^-])`)

// envName is the environment variable a flag is also read from: DSH_ and
// the flag's name upper-cased, dashes as underscores (--base-url:
// DSH_BASE_URL).
func envName(flagName string) string {
	return "DSH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// envHelp ends the flags of every command's help.
const envHelp = `
Every flag can also be set in the environment: DSH_ and the flag's name in
capitals, dashes as underscores (--base-url: DSH_BASE_URL). A flag given
on the command line wins over the environment, and so do --dir over
DSH_STORE, --store over DSH_DIR, and a FILE over DSH_STORE and DSH_SESSION;
an empty variable is unset.
`

// alternatives are flags that name one thing two ways: one of them on the
// command line keeps the others' variables out (DSH_STORE does not clash
// with --dir given on the command line).
var alternatives = [][]string{{"dir", "store"}}

// flagsFromEnv sets each flag of fs that the command line did not set
// from its environment variable, when that holds a value, except the
// flags skip names and the alternatives of a flag the command line gave.
// A value the flag refuses is bad usage naming the variable.
func flagsFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool), skip map[string]bool) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	out := map[string]bool{}
	for name := range skip {
		out[name] = true
	}
	for _, alt := range alternatives {
		for _, a := range alt {
			if given[a] {
				for _, b := range alt {
					out[b] = true
				}
			}
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || out[f.Name] {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usagef("%s: invalid value %q for $%s (--%s): %v", strings.TrimPrefix(fs.Name(), "dsh "), v, name, f.Name, serr)
		}
	})
	return err
}

// printFlags writes fs's flags as a command's help lists them: each
// spelled --name with its value's name, then its usage and its default
// (unless the usage already says it, or it is the zero value), then how
// to set them from the environment.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		value, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if value != "" {
			line += " " + value
		}
		usage = strings.ReplaceAll(usage, "\n", "\n    \t")
		if !strings.Contains(usage, "(default") && !isZeroValue(f) {
			if g, ok := f.Value.(flag.Getter); ok && isString(g.Get()) {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %v)", f.DefValue)
			}
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
	})
	if n > 0 {
		fmt.Fprint(w, envHelp)
	}
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// isZeroValue reports whether f's default is its type's zero value (as
// the flag package decides whether to print a default).
func isZeroValue(f *flag.Flag) (zero bool) {
	defer func() {
		if recover() != nil {
			zero = f.DefValue == ""
		}
	}()
	t := reflect.TypeOf(f.Value)
	var z reflect.Value
	if t.Kind() == reflect.Pointer {
		z = reflect.New(t.Elem())
	} else {
		z = reflect.Zero(t)
	}
	v, ok := z.Interface().(flag.Value)
	if !ok {
		return f.DefValue == ""
	}
	return f.DefValue == v.String()
}

// flagProbe is a stdout that asks a command for its flags instead of
// running it: parseFlags, given a *flagProbe, keeps the command's flag set
// in it and returns errHelp. The completion scripts are built this way.
type flagProbe struct{ fs *flag.FlagSet }

func (p *flagProbe) Write(b []byte) (int, error) { return len(b), nil }

// flagNames returns the flags a command takes, spelled --name, with
// --help; run is the command's entry point.
func flagNames(run func(args []string, stdout, stderr io.Writer) error) []string {
	var p flagProbe
	_ = run([]string{"--help"}, &p, io.Discard)
	var names []string
	if p.fs != nil {
		p.fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	}
	return append(names, "--help")
}
