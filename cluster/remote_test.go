package cluster

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/node"
)

// fakeSSH puts an ssh and an scp on PATH that record their argument lists
// in the returned directory (one file an invocation, named by the time it
// started, arguments separated by \x1f; a file each, because Prepare runs
// the hosts' commands at once and appends to one file interleave) and then do what the real ones would, on this machine: ssh runs
// the command with sh in home (the host's login directory), scp copies
// with cp -p. Both parse their options as OpenSSH does and need "--"
// before the destination and the files: without it they fail, as a host
// named like an option would have made the real ones misbehave.
func fakeSSH(t *testing.T, home string) string {
	t.Helper()
	bin := t.TempDir()
	calls := t.TempDir()
	// The options that take a value: ssh's -p is the port, scp's -P.
	opts := func(withValue string) string {
		return `while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    ` + withValue + `) shift 2 ;;
    -*) shift ;;
    *) echo "fake $0: $1 before --" >&2; exit 255 ;;
  esac
done
`
	}
	record := `printf '%s\037' "$(basename "$0")" "$@" > "$FAKE_SSH_CALLS/$(date +%s%N).$$"
`
	ssh := "#!/bin/sh\n" + record + opts("-o|-p|-F|-J|-i") + `shift # the destination
export SSH_CONNECTION="127.0.0.1 50000 127.0.0.1 22"
cd "$FAKE_SSH_HOME" && exec sh -c "$*"
`
	scp := "#!/bin/sh\n" + record + opts("-o|-P|-F|-J|-i") + `n=$#
i=0
for a in "$@"; do
  i=$((i+1))
  case "$a" in /*) p=$a ;; *:*) p=${a#*:} ;; *) p=$a ;; esac
  if [ $i -lt $n ]; then set -- "$@" "$p"; else dest=$p; fi
done
shift $n
exec cp -p "$@" "$dest"
`
	for name, text := range map[string]string{"ssh": ssh, "scp": scp} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_SSH_CALLS", calls)
	t.Setenv("FAKE_SSH_HOME", home)
	return calls
}

// readCalls returns every recorded invocation in the order they started:
// tool, then its arguments.
func readCalls(t *testing.T, dir string) [][]string {
	t.Helper()
	entries, err := os.ReadDir(dir) // sorted by name: the start times have equal widths
	if err != nil {
		t.Fatal(err)
	}
	var calls [][]string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, strings.Split(strings.TrimSuffix(string(b), "\x1f"), "\x1f"))
	}
	return calls
}

// An SSH launch ships the run's swarm key to every host (mode 0600) and
// gives every peer --swarm-key; every ssh and scp command line ends its
// options with "--" right before the destination (ssh) or the files
// (scp), so nothing after it is read as an option.
func TestSSHArgvEndsOptions(t *testing.T) {
	home := t.TempDir()
	calls := fakeSSH(t, home)
	key := filepath.Join(t.TempDir(), "swarm.key")
	if _, err := node.CreateSwarmKey(key, false); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "part-1.svm")
	if err := os.WriteFile(data, []byte("1 1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := DefaultSSH()
	hosts := []Host{{Spec: "vm1", Name: "vm1"}, {Spec: "ubuntu@vm2:2222", User: "ubuntu", Name: "vm2", Port: 2222}}
	s.Hosts, s.Binary, s.Run, s.Dir = hosts, os.Args[0], "run-1", t.TempDir()
	s.RemoteDir = "gt"
	s.Files = func(int) []string { return []string{data} }
	s.Options = []string{"-o", "ProxyJump=bastion"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Prepare(ctx, 2, key); err != nil {
		t.Fatal(err)
	}
	remoteKey := filepath.Join(home, "gt", "runs", "run-1", "swarm.key")
	st, err := os.Stat(remoteKey)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the key on the host: %v (mode %v), want a file of mode 0600", err, st.Mode())
	}
	if _, err := node.LoadSwarmKey(remoteKey); err != nil {
		t.Errorf("the shipped key does not load: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "gt", "data", "part-1.svm")); err != nil {
		t.Errorf("the data file was not shipped: %v", err)
	}

	var scps int
	for _, c := range readCalls(t, calls) {
		tool, args := c[0], c[1:]
		i := slices.Index(args, "--")
		if i < 0 {
			t.Errorf("%s %q: no --", tool, args)
			continue
		}
		for _, a := range args[:i] {
			if strings.Contains(a, "vm1") || strings.Contains(a, "vm2") {
				t.Errorf("%s %q: the host %q comes before --", tool, args, a)
			}
		}
		switch tool {
		case "ssh":
			if d := args[i+1]; d != "vm1" && d != "ubuntu@vm2" {
				t.Errorf("ssh %q: %q right after --, want the destination", args, d)
			}
			if len(args) != i+3 {
				t.Errorf("ssh %q: want exactly the destination and the command after --", args)
			}
		case "scp":
			scps++
			last := args[len(args)-1]
			if !strings.HasPrefix(last, "vm1:") && !strings.HasPrefix(last, "ubuntu@vm2:") {
				t.Errorf("scp %q: the last argument %q is not host:path", args, last)
			}
			for _, f := range args[i+1 : len(args)-1] {
				if !filepath.IsAbs(f) {
					t.Errorf("scp %q: %q after -- is not one of the local files", args, f)
				}
			}
		}
	}
	if scps < 2*3 { // per host: the binary, the data file, the key
		t.Errorf("%d scp calls, want at least 6", scps)
	}

	l, err := s.Launch(1, []string{"train", "--job", "j"})
	if err != nil {
		t.Fatal(err)
	}
	args := l.Cmd.Args[1:]
	i := slices.Index(args, "--")
	if i < 0 || args[i+1] != "ubuntu@vm2" || len(args) != i+3 {
		t.Fatalf("the peer's ssh %q: want -- then the destination and the command", args)
	}
	if !strings.Contains(args[i+2], "--swarm-key runs/run-1/swarm.key") {
		t.Errorf("the peer's command %q does not pass the shipped key", args[i+2])
	}

	// Fetch (a report or --save back) ends its options too.
	if err := os.WriteFile(filepath.Join(home, "gt", "runs", "run-1", "model.gt"), []byte("m"), 0o644); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "model.gt")
	if err := s.Fetch(ctx, 0, "runs/run-1/model.gt", local); err != nil {
		t.Fatal(err)
	}
	all := readCalls(t, calls)
	fetch := all[len(all)-1][1:]
	if i := slices.Index(fetch, "--"); i < 0 || fetch[i+1] != "vm1:"+filepath.Join(home, "gt")+"/runs/run-1/model.gt" || fetch[i+2] != local {
		t.Errorf("scp for Fetch %q: want -- then host:path and the local path", fetch)
	}
}

// A host or user that starts with '-' is refused before any ssh runs.
func TestParseHostRefusesOptions(t *testing.T) {
	for _, s := range []string{"-oProxyCommand=touch /tmp/x", "-oProxyCommand=x", "-v", "-F", "root@-oProxyCommand=x", "--", "-vm1:22"} {
		if h, err := ParseHost(s); err == nil || !strings.Contains(err.Error(), "'-'") {
			t.Errorf("ParseHost(%q) = %+v, %v; want an error about the leading '-'", s, h, err)
		}
	}
	if _, err := ParseHost("vm-1"); err != nil {
		t.Errorf("ParseHost(vm-1): %v; a '-' inside a name is fine", err)
	}
}

func TestParseHost(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Host
		err  string
	}{
		{"vm1", Host{Name: "vm1"}, ""},
		{"ubuntu@vm3:2222", Host{User: "ubuntu", Name: "vm3", Port: 2222}, ""},
		{"10.0.0.5", Host{Name: "10.0.0.5"}, ""},
		{"root@[fd00::5]:22", Host{User: "root", Name: "fd00::5", Port: 22}, ""},
		{"[::1]", Host{Name: "::1"}, ""},
		{"fd00::5", Host{}, "in brackets"},
		{"vm1:0", Host{}, "port"},
		{"vm1:ssh", Host{}, "port"},
		{"@vm1", Host{}, "user"},
		{"vm 1", Host{}, "host name"},
		{"vm1;reboot", Host{}, "host name"},
		{"", Host{}, "empty"},
		{"-oProxyCommand=touch /tmp/pwned", Host{}, "starts with '-'"},
		{"-oProxyCommand=x", Host{}, "starts with '-'"},
		{"root@-oProxyCommand=x", Host{}, "starts with '-'"},
	} {
		h, err := ParseHost(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseHost(%q) = %+v, %v; want an error about %q", c.in, h, err, c.err)
			}
			continue
		}
		c.want.Spec = c.in
		if err != nil || h != c.want {
			t.Errorf("ParseHost(%q) = %+v, %v; want %+v", c.in, h, err, c.want)
		}
	}
}
