package main

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/cli"
)

// The version says which build this is: the module version and the VCS
// revision Go embeds, and --version prints it, not "dev".
func TestVersionFromBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2025-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got, want := buildVersion(info), "v1.2.3 rev 0123456789ab 2025-01-02T03:04:05Z modified"; got != want {
		t.Errorf("buildVersion = %q, want %q", got, want)
	}
	if got := buildVersion(&debug.BuildInfo{}); !strings.HasPrefix(got, "(devel) (no VCS information") {
		t.Errorf("no build settings: %q", got)
	}
	var out, errb strings.Builder
	cli.Main([]string{"--version"}, &out, &errb)
	if !strings.HasPrefix(out.String(), "gossiptrain ") || strings.HasPrefix(out.String(), "gossiptrain dev") {
		t.Errorf("--version printed %q", out.String())
	}
}
