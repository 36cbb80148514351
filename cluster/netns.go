package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// NetNS shapes every peer's link: each peer runs in a network namespace of
// its own, joined by a veth pair to a bridge in the root namespace, with
// tc queueing disciplines on both ends of its veth pair. Linux only; it
// needs root and the ip and tc commands (iproute2).
//
// Values use tc's syntax and are checked by Validate; an empty value
// leaves that property alone.
type NetNS struct {
	// Rate limits each peer's link in each direction (a token bucket,
	// tc-tbf, on both ends of its veth): "100mbit", "1gbit", "500kbit".
	// A 100mbit link carried 92-96 Mbit/s of TCP payload on this project's
	// VM (TestNetNSRateAndDelay measures it).
	Rate string
	// Delay is added to every packet a peer receives (tc-netem on the
	// bridge's end of its veth), so it is the one-way delay between any
	// two peers and the round-trip time is twice it: "1ms", "500us".
	Delay string
	// Loss is the share of the packets a peer receives that are dropped
	// (tc-netem): "0.1%". Dropping on the receiving side, after the
	// sender's stack, lets TCP see it as a loss on the path, not as local
	// congestion.
	Loss string
}

var (
	rateRe  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?([kmgt]?(bit|bps))$`)
	delayRe = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(us|ms|s)$`)
	lossRe  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?%$`)
)

// Validate checks the values' syntax (before any of them reaches tc).
func (n *NetNS) Validate() error {
	if n.Rate != "" {
		if !rateRe.MatchString(strings.ToLower(n.Rate)) {
			return fmt.Errorf("cluster: %w: NetNS.Rate %q: want a tc rate such as 100mbit, 1gbit or 500kbit", ErrConfig, n.Rate)
		}
		if bps, err := n.rateBytes(); err != nil || bps < 1000 {
			return fmt.Errorf("cluster: %w: NetNS.Rate %q: want at least 8kbit", ErrConfig, n.Rate)
		}
	}
	if n.Delay != "" && !delayRe.MatchString(n.Delay) {
		return fmt.Errorf("cluster: %w: NetNS.Delay %q: want a tc time such as 1ms, 500us or 0.1s", ErrConfig, n.Delay)
	}
	if n.Loss != "" {
		if !lossRe.MatchString(n.Loss) {
			return fmt.Errorf("cluster: %w: NetNS.Loss %q: want a percentage such as 0.1%%", ErrConfig, n.Loss)
		}
		if v, _ := strconv.ParseFloat(strings.TrimSuffix(n.Loss, "%"), 64); v > 100 {
			return fmt.Errorf("cluster: %w: NetNS.Loss %q: at most 100%%", ErrConfig, n.Loss)
		}
	}
	return nil
}

// rateBytes is Rate in bytes per second (tc's units: k = 1000, bit or
// bps = bytes per second).
func (n *NetNS) rateBytes() (float64, error) {
	m := rateRe.FindStringSubmatch(strings.ToLower(n.Rate))
	if m == nil {
		return 0, fmt.Errorf("bad rate %q", n.Rate)
	}
	num := strings.TrimSuffix(strings.ToLower(n.Rate), m[2])
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, err
	}
	unit := m[2]
	mult := map[byte]float64{'k': 1e3, 'm': 1e6, 'g': 1e9, 't': 1e12}
	if f, ok := mult[unit[0]]; ok {
		v *= f
		unit = unit[1:]
	}
	if unit == "bit" {
		v /= 8
	}
	return v, nil
}

// String describes the shaping for logs and reports.
func (n *NetNS) String() string {
	var parts []string
	if n.Rate != "" {
		parts = append(parts, "rate "+n.Rate)
	}
	if n.Delay != "" {
		parts = append(parts, "delay "+n.Delay)
	}
	if n.Loss != "" {
		parts = append(parts, "loss "+n.Loss)
	}
	if len(parts) == 0 {
		return "no shaping"
	}
	return strings.Join(parts, ", ")
}

// subnetPrefix starts the peers' addresses: peer i is 10.231.0.(i+2). Every run
// has its own bridge, so runs never see each other's addresses.
const subnetPrefix = "10.231.0."

// namePrefix starts every namespace and link this package creates.
const namePrefix = "gt"

// runCounter numbers the runs of this process, for unique names.
var runCounter atomic.Int64

// newPrefix returns a name prefix unique to this process and run:
// "gt<pid>-<run>-" in base 36, short enough for 15-byte interface names.
func newPrefix() string {
	run := runCounter.Add(1) % (36 * 36)
	return namePrefix + strconv.FormatInt(int64(os.Getpid()), 36) + "-" + strconv.FormatInt(run, 36) + "-"
}

// network is a bridge and one namespace per peer.
type network struct {
	prefix string
	bridge string
	ns     []string // namespace of peer i
	host   []string // the root namespace's end of peer i's veth
	peer   []string // peer i's end, inside its namespace
	addr   []string // peer i's IPv4 address
}

func newNetwork(prefix string, n int) *network {
	nw := &network{prefix: prefix, bridge: prefix + "b"}
	for i := range n {
		s := strconv.FormatInt(int64(i), 36)
		nw.ns = append(nw.ns, prefix+"n"+s)
		nw.host = append(nw.host, prefix+"h"+s)
		nw.peer = append(nw.peer, prefix+"p"+s)
		nw.addr = append(nw.addr, subnetPrefix+strconv.Itoa(i+2))
	}
	return nw
}

// checkNetNSSupport reports why namespaces cannot be used here, or nil.
func checkNetNSSupport() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("cluster: %w: creating network namespaces needs root (ip netns add): run as root, or without --netns", ErrNetNS)
	}
	for _, c := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("cluster: %w: the %s command is missing (Debian: apt-get install iproute2): %v", ErrNetNS, c, err)
		}
	}
	return nil
}

// ip runs one ip or tc command and returns its output; the error names
// the command and shows what it printed.
func ip(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("cluster: %w: %s %s: %v: %s", ErrNetNS, name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.Bytes(), nil
}

// setupNetwork creates the bridge, the namespaces, the veth pairs and the
// qdiscs of n peers. On error it removes whatever it created.
func setupNetwork(ctx context.Context, prefix string, n int, shape NetNS) (nw *network, err error) {
	if err := checkNetNSSupport(); err != nil {
		return nil, err
	}
	if shape.Delay != "" || shape.Loss != "" {
		if err := netemAvailable(ctx, prefix); err != nil {
			return nil, err
		}
	}
	nw = newNetwork(prefix, n)
	defer func() {
		if err != nil {
			if cerr := nw.close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
			nw = nil
		}
	}()
	run := func(name string, args ...string) error {
		_, err := ip(ctx, name, args...)
		return err
	}
	if err := run("ip", "link", "add", nw.bridge, "type", "bridge"); err != nil {
		return nw, err
	}
	if err := run("ip", "link", "set", nw.bridge, "up"); err != nil {
		return nw, err
	}
	tbf, err := shape.tbfArgs()
	if err != nil {
		return nw, fmt.Errorf("cluster: %w: NetNS.Rate: %v", ErrConfig, err)
	}
	for i := range n {
		ns, h, p := nw.ns[i], nw.host[i], nw.peer[i]
		steps := [][]string{
			{"ip", "netns", "add", ns},
			{"ip", "link", "add", h, "type", "veth", "peer", "name", p, "netns", ns},
			{"ip", "link", "set", h, "master", nw.bridge},
			{"ip", "link", "set", h, "up"},
			{"ip", "-n", ns, "link", "set", "lo", "up"},
			{"ip", "-n", ns, "addr", "add", nw.addr[i] + "/24", "dev", p},
			{"ip", "-n", ns, "link", "set", p, "up"},
		}
		// Towards the peer (egress of the bridge's end): netem's delay and
		// loss, then the rate limit.
		netem := shape.netemArgs()
		switch {
		case netem != nil && tbf != nil:
			steps = append(steps,
				append([]string{"tc", "qdisc", "add", "dev", h, "root", "handle", "1:", "netem"}, netem...),
				append([]string{"tc", "qdisc", "add", "dev", h, "parent", "1:1", "handle", "10:", "tbf"}, tbf...))
		case netem != nil:
			steps = append(steps, append([]string{"tc", "qdisc", "add", "dev", h, "root", "netem"}, netem...))
		case tbf != nil:
			steps = append(steps, append([]string{"tc", "qdisc", "add", "dev", h, "root", "tbf"}, tbf...))
		}
		// From the peer (egress of its own end): the rate limit.
		if tbf != nil {
			steps = append(steps, append([]string{"tc", "-n", ns, "qdisc", "add", "dev", p, "root", "tbf"}, tbf...))
		}
		for _, s := range steps {
			if err := run(s[0], s[1:]...); err != nil {
				return nw, err
			}
		}
	}
	return nw, nil
}

// ErrNoNetem marks a kernel without tc-netem (CONFIG_NET_SCH_NETEM), which
// NetNS.Delay and NetNS.Loss need.
var ErrNoNetem = errors.New("tc-netem is not available in this kernel (CONFIG_NET_SCH_NETEM): delay and loss need it; the rate limit works without it")

// netemAvailable tries netem on the loopback device of a scratch namespace
// named prefix+"probe".
func netemAvailable(ctx context.Context, prefix string) error {
	ns := prefix + "probe"
	if _, err := ip(ctx, "ip", "netns", "add", ns); err != nil {
		return err
	}
	defer ip(context.Background(), "ip", "netns", "del", ns)
	if _, err := ip(ctx, "tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"); err != nil {
		return fmt.Errorf("cluster: %w: %w (%v)", ErrNetNS, ErrNoNetem, err)
	}
	return nil
}

// CheckNetNS reports why Config.NetNS cannot work on this machine (not
// root, iproute2 missing, namespaces not permitted, as in a container
// without CAP_SYS_ADMIN), or nil when it can.
func CheckNetNS() error {
	if err := checkNetNSSupport(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns := newPrefix() + "probe"
	if _, err := ip(ctx, "ip", "netns", "add", ns); err != nil {
		return err
	}
	_, err := ip(ctx, "ip", "netns", "del", ns)
	return err
}

// NetemAvailable reports whether this kernel has tc-netem, which
// NetNS.Delay and NetNS.Loss need (it needs root, like NetNS itself).
func NetemAvailable() error {
	if err := checkNetNSSupport(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return netemAvailable(ctx, newPrefix())
}

// tbfArgs are tc-tbf's parameters for Rate, or nil without a rate. The
// bucket holds 4 ms of traffic (at least 16 KiB, so a 64 KiB GSO packet
// is split rather than dropped at low rates), the queue 50 ms.
func (n *NetNS) tbfArgs() ([]string, error) {
	if n.Rate == "" {
		return nil, nil
	}
	bps, err := n.rateBytes()
	if err != nil {
		return nil, err
	}
	burst := max(int64(bps*0.004), 16<<10)
	return []string{"rate", strings.ToLower(n.Rate), "burst", strconv.FormatInt(burst, 10), "latency", "50ms"}, nil
}

// netemArgs are tc-netem's parameters for Delay and Loss, or nil.
func (n *NetNS) netemArgs() []string {
	if n.Delay == "" && n.Loss == "" {
		return nil
	}
	args := []string{"limit", "100000"} // never netem's queue that drops: tbf's does
	if n.Delay != "" {
		args = append(args, "delay", n.Delay)
	}
	if n.Loss != "" {
		args = append(args, "loss", n.Loss)
	}
	return args
}

// command returns the command line that runs bin in peer i's namespace.
func (nw *network) command(i int, bin string, args []string) (string, []string) {
	return "ip", append([]string{"netns", "exec", nw.ns[i], bin}, args...)
}

// close removes everything newNetwork's prefix names (processes left in
// the namespaces are killed first).
func (nw *network) close() error {
	return Cleanup(nw.prefix)
}

// Cleanup removes every network namespace and root-namespace link of the
// run whose prefix is given (Result.NetNS: "gt<pid>-<run>-") (their qdiscs go with them), killing the
// processes still running in those namespaces first. It is how a run
// tears its network down; called with a crashed run's prefix it removes
// that run's leftovers. Names that do not exist are not an error.
func Cleanup(prefix string) error {
	if !prefixRe.MatchString(prefix) {
		return fmt.Errorf("cluster: %w: Cleanup(%q): not a run's prefix (gt<pid>-<run>-, as Result.NetNS)", ErrConfig, prefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nss, links, err := listNames(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range nss {
		if strings.HasPrefix(ns, prefix) {
			errs = append(errs, killNamespacePids(ctx, ns))
		}
	}
	// Veths first (deleting one end deletes both), bridges last.
	for _, bridges := range []bool{false, true} {
		for _, l := range links {
			if strings.HasPrefix(l, prefix) && isBridgeName(l) == bridges {
				if _, err := ip(ctx, "ip", "link", "del", l); err != nil && linkExists(ctx, l) {
					errs = append(errs, err)
				}
			}
		}
	}
	for _, ns := range nss {
		if strings.HasPrefix(ns, prefix) {
			if _, err := ip(ctx, "ip", "netns", "del", ns); err != nil && nsExists(ctx, ns) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// prefixRe matches a run's prefix.
var prefixRe = regexp.MustCompile(`^gt[0-9a-z]+-[0-9a-z]+-$`)

// nameRe parses the names this package creates: gt<pid>-<run>-<kind><i>.
var nameRe = regexp.MustCompile(`^gt([0-9a-z]+)-([0-9a-z]+)-([bhpn])([0-9a-z]*)$`)

func isBridgeName(name string) bool {
	m := nameRe.FindStringSubmatch(name)
	return m != nil && m[3] == "b"
}

// CleanupStale removes the namespaces and links left behind by runs whose
// process is gone (killed with SIGKILL, or a machine crash), and returns
// the run prefixes it removed. Runs of live processes are left alone.
func CleanupStale() ([]string, error) {
	if err := checkNetNSSupport(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nss, links, err := listNames(ctx)
	if err != nil {
		return nil, err
	}
	stale := map[string]bool{}
	var prefixes []string
	for _, name := range append(nss, links...) {
		m := nameRe.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		pid, err := strconv.ParseInt(m[1], 36, 64)
		if err != nil || pid <= 0 || pid > 1<<22 || processAlive(int(pid)) {
			continue
		}
		p := "gt" + m[1] + "-" + m[2] + "-"
		if !stale[p] {
			stale[p] = true
			prefixes = append(prefixes, p)
		}
	}
	var errs []error
	for _, p := range prefixes {
		errs = append(errs, Cleanup(p))
	}
	return prefixes, errors.Join(errs...)
}

// processAlive reports whether a process with this PID exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// listNames returns the network namespaces and the root namespace's links
// that this package may have created.
func listNames(ctx context.Context) (nss, links []string, err error) {
	out, err := ip(ctx, "ip", "netns", "list")
	if err != nil {
		return nil, nil, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && nameRe.MatchString(f[0]) {
			nss = append(nss, f[0])
		}
	}
	links, err = linkNames(ctx, "")
	return nss, links, err
}

// linkNames lists the links of namespace ns ("" is the root namespace)
// whose names this package may have created.
func linkNames(ctx context.Context, ns string) ([]string, error) {
	args := []string{"-o", "link", "show"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := ip(ctx, "ip", args...)
	if err != nil {
		return nil, err
	}
	var links []string
	for _, line := range strings.Split(string(out), "\n") {
		// "12: gt1a2b-1-h0@if11: <BROADCAST,…"
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if nameRe.MatchString(name) {
			links = append(links, name)
		}
	}
	return links, nil
}

func linkExists(ctx context.Context, name string) bool {
	_, err := ip(ctx, "ip", "link", "show", "dev", name)
	return err == nil
}

func nsExists(ctx context.Context, name string) bool {
	out, err := ip(ctx, "ip", "netns", "list")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// killNamespacePids kills (SIGKILL) every process in namespace ns and
// waits up to 5 s for them to go.
func killNamespacePids(ctx context.Context, ns string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := ip(ctx, "ip", "netns", "pids", ns)
		if err != nil {
			if !nsExists(ctx, ns) {
				return nil
			}
			return err
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: %w: processes %s in namespace %s survive SIGKILL", ErrNetNS, strings.Join(pids, ","), ns)
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // the kernel reaps them in microseconds; poll, not hope
		}
	}
}
