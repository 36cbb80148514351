package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/node"
)

// help lists launch, not the agent it runs on the hosts.
func TestLaunchInHelp(t *testing.T) {
	_, out, _ := gt(t, "help")
	if !strings.Contains(out, "  launch ") || strings.Contains(out, "launch-agent") {
		t.Errorf("gossiptrain help should list launch and not launch-agent:\n%s", out)
	}
	if code, out, _ := gt(t, "launch", "--help"); code != 0 || !strings.Contains(out, "--hosts") || !strings.Contains(out, "--ship-data") || !strings.Contains(out, "--batch") {
		t.Errorf("launch --help: exit %d\n%s", code, out)
	}
}

func TestLaunchUsageErrors(t *testing.T) {
	t.Chdir(t.TempDir()) // the run directories launch makes before it finds a mistake
	hostsFile := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hostsFile, []byte("vm1 # the first\n\nvm2 vm3\n"), 0o644)
	optionHosts := filepath.Join(t.TempDir(), "option-hosts")
	os.WriteFile(optionHosts, []byte("vm1\n-oProxyCommand=x\n"), 0o644)
	looseKey := filepath.Join(t.TempDir(), "loose.key")
	os.WriteFile(looseKey, node.EncodeSwarmKey(make([]byte, 32)), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"launch"}, "--hosts: give at least one host"},
		{[]string{"launch", "--hosts", "vm1:99999"}, "--hosts: host \"vm1:99999\": port"},
		{[]string{"launch", "--hosts-file", hostsFile}, hostsFile + ":3: \"vm2 vm3\": one host a line"},
		{[]string{"launch", "--hosts", "vm1", "--remote-dir", "a b"}, "--remote-dir"},
		{[]string{"launch", "--hosts", "vm1", "--", "--train", "/nonexistent/x.svm"}, "--dim: required when --train names the hosts' files"},
		{[]string{"launch", "--hosts", "vm1", "--", "--train", "/nonexistent/x.svm", "--dim", "10"}, "--model: give logreg"},
		{[]string{"launch", "--hosts", "vm1", "--", "--train", "/nonexistent/x.svm", "--dim", "10", "--model", "softmax"}, "--classes: required"},
		{[]string{"launch", "--hosts", "vm1", "--ship-data", "--", "--train", "/nonexistent/x.svm"}, "--train: \"/nonexistent/x.svm\": no such file"},
		{[]string{"launch", "--hosts", "vm1", "--", "--nosuchflag"}, "nosuchflag"},
		// ssh would take a host that starts with '-' for an option.
		{[]string{"launch", "--hosts", "-oProxyCommand=touch /tmp/pwned"}, "--hosts: host \"-oProxyCommand=touch /tmp/pwned\": starts with '-'"},
		{[]string{"launch", "--hosts=vm1,-oProxyCommand=x"}, "--hosts: host \"-oProxyCommand=x\": starts with '-'"},
		{[]string{"launch", "--hosts-file", optionHosts}, "--hosts-file: host \"-oProxyCommand=x\": starts with '-'"},
		{[]string{"launch", "--hosts", "vm1", "--swarm-key", looseKey}, "--swarm-key: "},
	} {
		code, _, errOut := gt(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
}
