package main

import (
	"flag"

	"github.com/dshgo/dsh/actors/persister"
)

// storeFlags are --dir and --store, the two ways to name where sessions
// live: --dir DIR is --store jsonl:DIR, kept because every command had it
// first. Giving both is bad usage: which one wins would be a guess.
type storeFlags struct {
	dir, store string
}

// storeFlagUsage is --store's help text.
const storeFlagUsage = "the store holding the sessions: jsonl:DIR (a directory of JSONL logs; a bare DIR is the same) or sqlite:PATH (one SQLite database)"

func (s *storeFlags) register(fs *flag.FlagSet, dirUsage string) {
	fs.StringVar(&s.dir, "dir", "", dirUsage)
	fs.StringVar(&s.store, "store", "", storeFlagUsage)
}

// given reports whether either flag was given.
func (s storeFlags) given() bool { return s.dir != "" || s.store != "" }

// location returns the store the flags name, parsed, and the default data
// directory when neither was given. cmd names the command in a usage
// error.
func (s storeFlags) location(cmd string) (persister.Location, error) {
	switch {
	case s.dir != "" && s.store != "":
		return persister.Location{}, usagef("%s: --dir and --store both given (--dir DIR is --store jsonl:DIR: give one)", cmd)
	case s.store != "":
		loc, err := persister.ParseStoreURL(s.store)
		if err != nil {
			return persister.Location{}, usagef("%s: --store: %s", cmd, trimPkg(err))
		}
		return loc, nil
	case s.dir != "":
		return persister.Location{Scheme: persister.SchemeJSONL, Path: s.dir}, nil
	}
	d, err := defaultDataDir()
	if err != nil {
		return persister.Location{}, err
	}
	return persister.Location{Scheme: persister.SchemeJSONL, Path: d}, nil
}

// trimPkg is err's text without the "persister: " its package puts first:
// a command line error names the flag instead.
func trimPkg(err error) string {
	const p = "persister: "
	s := err.Error()
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
