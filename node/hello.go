package node

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// HelloProtocol is the stream protocol two peers run right after they
// connect, to check that they can talk: each side sends a hello and reads
// the other's. Peers of the same job must use the same gossipsub maximum
// message size (a message over a receiver's limit is dropped without an
// error) and the same wire version; a peer that differs is refused: logged,
// disconnected and blocked for Config.BlockFor.
const HelloProtocol = protocol.ID("/gossiptrain/hello/1.0.0")

// helloMagic starts every hello body, so a stray stream is not misread.
const helloMagic = "GTH1"

// maxHello bounds a hello frame: magic, two varints, a job name of at most
// maxJobLen bytes and a version byte fit in far less.
const maxHello = 256

// hello is what a peer says about itself on connect.
type hello struct {
	Job            string // the peer's job
	MaxMessageSize uint64 // its gossipsub maximum message size
	WireVersion    byte   // gossip/wire Version it speaks
}

// appendHello appends h as one frame: uvarint body length, then the body
// "GTH1", uvarint MaxMessageSize, uvarint len(Job), Job, WireVersion.
func appendHello(dst []byte, h hello) []byte {
	body := make([]byte, 0, 32+len(h.Job))
	body = append(body, helloMagic...)
	body = binary.AppendUvarint(body, h.MaxMessageSize)
	body = binary.AppendUvarint(body, uint64(len(h.Job)))
	body = append(body, h.Job...)
	body = append(body, h.WireVersion)
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	return append(dst, body...)
}

// parseHello parses a hello body (without its length prefix).
func parseHello(b []byte) (hello, error) {
	var h hello
	if len(b) < len(helloMagic) || string(b[:len(helloMagic)]) != helloMagic {
		return h, fmt.Errorf("%w: does not start with %q", ErrHello, helloMagic)
	}
	pos := len(helloMagic)
	size, k := binary.Uvarint(b[pos:])
	if k <= 0 {
		return h, fmt.Errorf("%w: byte %d: bad max message size", ErrHello, pos)
	}
	pos += k
	n, k := binary.Uvarint(b[pos:])
	if k <= 0 || n > maxJobLen {
		return h, fmt.Errorf("%w: byte %d: bad job length", ErrHello, pos)
	}
	pos += k
	if uint64(len(b)-pos) != n+1 {
		return h, fmt.Errorf("%w: %d bytes after the job length %d, want %d", ErrHello, len(b)-pos, n, n+1)
	}
	h.MaxMessageSize = size
	h.Job = string(b[pos : pos+int(n)])
	h.WireVersion = b[len(b)-1]
	return h, nil
}

// readHello reads one hello frame.
func readHello(r io.Reader) (hello, error) {
	br := bufio.NewReaderSize(r, 64)
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return hello{}, fmt.Errorf("%w: length: %v", ErrHello, err)
	}
	if n > maxHello {
		return hello{}, fmt.Errorf("%w: frame of %d bytes, limit %d", ErrHello, n, maxHello)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return hello{}, fmt.Errorf("%w: body: %v", ErrHello, err)
	}
	return parseHello(body)
}

// compatible says whether a peer that sent theirs may stay connected to one
// that sent ours. Peers of other jobs may share a swarm (they never share a
// topic), so only a peer of the same job with a different max message size
// or wire version is refused.
func compatible(ours, theirs hello) error {
	if theirs.Job != ours.Job {
		return nil
	}
	if theirs.MaxMessageSize != ours.MaxMessageSize {
		return fmt.Errorf("it uses gossipsub max message size %d, this peer %d: every peer of job %q must use the same --max-message-size, or messages over the smaller limit are lost",
			theirs.MaxMessageSize, ours.MaxMessageSize, ours.Job)
	}
	if theirs.WireVersion != ours.WireVersion {
		return fmt.Errorf("it speaks wire version %d, this peer %d: run the same gossiptrain release on every peer", theirs.WireVersion, ours.WireVersion)
	}
	return nil
}

// ourHello is what this node sends.
func (c *Config) hello() hello {
	return hello{Job: c.Job, MaxMessageSize: uint64(c.MaxMessageSize), WireVersion: wire.Version}
}
