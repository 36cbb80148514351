// Command gossiptrain trains large sparse models with SGD on a group of
// peers that shard the model among themselves, with no master.
//
// Run "gossiptrain help" for the commands and "gossiptrain COMMAND --help"
// for each command's flags. The README explains the design and the main
// workflows; package cli is the command line itself.
package main

import (
	"os"
	"runtime/debug"

	"github.com/gossiptrain/gossiptrain/cli"
)

// version is the binary's version: set at build time with -ldflags
// "-X main.version=…", or else read from the build information Go embeds
// (see buildVersion).
var version = "dev"

func init() {
	cli.Version = version
	if version == "dev" {
		if info, ok := debug.ReadBuildInfo(); ok {
			cli.Version = buildVersion(info)
		}
	}
}

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}

// buildVersion describes a build from its embedded information: the main
// module's version (a tag such as v1.2.0 when built with 'go install
// …@v1.2.0', "(devel)" from a checkout) and the VCS revision, commit time
// and whether the tree had uncommitted changes, which 'go build' records in
// a git checkout: "(devel) rev 1a2b3c4d5e6f 2025-01-02T03:04:05Z modified".
func buildVersion(info *debug.BuildInfo) string {
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		v += " rev " + rev[:min(12, len(rev))]
		if t := settings["vcs.time"]; t != "" {
			v += " " + t
		}
		if settings["vcs.modified"] == "true" {
			v += " modified"
		}
	} else {
		v += " (no VCS information: built outside a git checkout or with -buildvcs=false)"
	}
	return v
}
