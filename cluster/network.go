package cluster

import (
	"context"
	"os/exec"
)

// Network is a set of network namespaces joined to one bridge, as NetNS
// runs use for their peers: n separate hosts on one machine, host i at
// Addr(i) (10.231.0.(i+2)/24). Tests of tools that talk to other hosts
// (launch over SSH) run servers in them. Linux, root, iproute2.
type Network struct {
	nw *network
}

// NewNetwork creates n namespaces with links shaped as shape says (the
// zero NetNS: no shaping). Names carry this process's ID, so parallel
// runs never collide; Close removes everything.
func NewNetwork(ctx context.Context, n int, shape NetNS) (*Network, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	nw, err := setupNetwork(ctx, newPrefix(), n, shape)
	if err != nil {
		return nil, err
	}
	return &Network{nw: nw}, nil
}

// Addr is host i's IPv4 address.
func (n *Network) Addr(i int) string { return n.nw.addr[i] }

// Namespace is host i's network namespace (ip netns exec NAME …).
func (n *Network) Namespace(i int) string { return n.nw.ns[i] }

// Prefix starts the names of every namespace and link of the network.
func (n *Network) Prefix() string { return n.nw.prefix }

// Command returns a command that runs name with args in host i's
// namespace.
func (n *Network) Command(i int, name string, args ...string) *exec.Cmd {
	c, a := n.nw.command(i, name, args)
	return exec.Command(c, a...)
}

// Close kills every process left in the namespaces and removes the
// namespaces, links and bridge.
func (n *Network) Close() error { return n.nw.close() }
