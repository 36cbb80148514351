package node

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The allow-list (Config.PeersAllowed): a file of the peer IDs this peer
// may connect to and accept connections from. The gater refuses every
// other peer at the dial and right after the handshake (InterceptSecured),
// before any protocol runs. The file is polled every allowPoll (2s); a change
// is logged (peers added and removed), and connected peers no longer
// listed are disconnected. Polling rather than SIGHUP: it needs no signal
// (the launch agent and cluster use signals for other things), works for
// embedders, and a copy pushed with scp or a config-management tool takes
// effect without anyone signalling the process.

// allowPoll is how often the allow-list file is checked for changes (its
// size and modification time).
var allowPoll = 2 * time.Second

// ErrPeersAllowed marks an allow-list file that cannot be used.
var ErrPeersAllowed = errors.New("node: bad peers-allowed file")

// maxAllowFile bounds the allow-list file: about 50,000 peer IDs.
const maxAllowFile = 4 << 20

// ReadPeersAllowed reads an allow-list: one peer ID a line; '#' starts a
// comment, blank lines are ignored. An error names the file and the line
// at fault and wraps ErrPeersAllowed (fs.ErrNotExist for a missing file).
// A file that lists no peer is an error too: it would refuse every peer.
// TestReadPeersAllowed pins it.
func ReadPeersAllowed(path string) ([]peer.ID, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPeersAllowed, err)
	}
	if len(raw) > maxAllowFile {
		return nil, fmt.Errorf("%w: %s: %d bytes, at most %d", ErrPeersAllowed, path, len(raw), maxAllowFile)
	}
	var ids []peer.ID
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 4096), maxAllowFile)
	for line := 1; sc.Scan(); line++ {
		s, _, _ := strings.Cut(sc.Text(), "#")
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if strings.ContainsAny(s, " \t") {
			return nil, fmt.Errorf("%w: %s:%d: %q: one peer ID a line", ErrPeersAllowed, path, line, s)
		}
		id, err := peer.Decode(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %q is not a peer ID (want the ID a peer logs at start, 12D3KooW…): %v", ErrPeersAllowed, path, line, s, err)
		}
		ids = append(ids, id)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrPeersAllowed, path, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: %s lists no peer ID: this peer would refuse every other peer", ErrPeersAllowed, path)
	}
	return ids, nil
}

// Allowed reports whether the allow-list lets peer p connect to this one
// (always without Config.PeersAllowed, and always for this peer itself).
func (n *Node) Allowed(p peer.ID) bool { return n.gater.allowed(p) }

// loadAllow reads Config.PeersAllowed into the gater before the host
// starts, so that no connection is ever accepted unchecked. Its error is a
// *FieldError on PeersAllowed naming the file and line.
func (n *Node) loadAllow() error {
	if n.cfg.PeersAllowed == "" {
		return nil
	}
	ids, err := ReadPeersAllowed(n.cfg.PeersAllowed)
	if err != nil {
		return fieldErr("PeersAllowed", "%v", strings.TrimPrefix(err.Error(), ErrPeersAllowed.Error()+": "))
	}
	n.gater.setAllowed(n.self, ids)
	n.log.Info().Str("file", n.cfg.PeersAllowed).Int("peers", len(ids)).
		Msg("allow-list: only the peers listed may connect (the file is re-read when it changes)")
	return nil
}

// watchAllow polls the allow-list file until the node closes, applying
// every change: peers added may connect; peers removed are disconnected
// and refused. A file that cannot be read or parsed is logged and the
// list in force is kept. TestAllowListReload pins it.
func (n *Node) watchAllow() {
	path := n.cfg.PeersAllowed
	if path == "" {
		return
	}
	last, _ := fileStampOf(path)
	t := time.NewTicker(allowPoll)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		stamp, err := fileStampOf(path)
		if err == nil && stamp == last {
			continue
		}
		var ids []peer.ID
		if err == nil {
			ids, err = ReadPeersAllowed(path)
		}
		if err != nil {
			if err.Error() != lastErr { // once per problem, not every poll
				n.log.Error().Err(err).Str("file", path).Msg("allow-list not reloaded: keeping the list in force")
				lastErr = err.Error()
			}
			continue
		}
		last, lastErr = stamp, ""
		added, removed := n.gater.setAllowed(n.self, ids)
		if len(added)+len(removed) > 0 {
			n.log.Info().Str("file", path).Strs("added", idStrings(added)).Strs("removed", idStrings(removed)).
				Int("peers", len(ids)).Msg("allow-list changed")
		}
		n.dropDisallowed()
	}
}

// dropDisallowed closes the connections of every connected peer the
// allow-list no longer lets in.
func (n *Node) dropDisallowed() {
	net := n.host.Network()
	for _, p := range net.Peers() {
		if n.gater.allowed(p) || net.Connectedness(p) != network.Connected {
			continue
		}
		if err := net.ClosePeer(p); err != nil {
			n.log.Warn().Str("peer", p.String()).Err(err).Msg("disconnecting a peer removed from the allow-list")
			continue
		}
		n.log.Info().Str("peer", p.String()).Msg("disconnected: no longer on the allow-list")
	}
}

// fileStampOf is a file's size and modification time, to notice changes.
func fileStampOf(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %d", st.Size(), st.ModTime().UnixNano()), nil
}

func idStrings(ids []peer.ID) []string {
	out := make([]string, len(ids))
	for i, p := range ids {
		out[i] = p.String()
	}
	return out
}
