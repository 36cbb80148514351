package node

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// HelloProtocol is the stream protocol two peers run right after they
// connect, to check that they can train together: each side sends a hello
// and reads the other's. Peers of the same job must use the same gossipsub
// maximum message size (a message over a receiver's limit is dropped
// without an error), the same wire version, and the same job settings
// (Config.Spec and the ring: the model's dimension, kind and classes, the
// shards, the mode, the optimizer, …); a peer that differs is refused on
// both sides: logged with every setting that differs, disconnected and
// blocked for Config.BlockFor.
const HelloProtocol = protocol.ID("/gossiptrain/hello/1.0.0")

// Hello body formats, told apart by their first four bytes. helloMagic is
// what this release sends; helloMagicV1 (no job settings) is still parsed,
// so a peer of an older release is refused with a message saying so
// rather than ignored.
const (
	helloMagic   = "GTH2"
	helloMagicV1 = "GTH1"
)

// Bounds of a hello: a frame of at most maxHello bytes, at most
// maxSpecItems settings with names of at most maxSpecFlag bytes and values
// of at most maxSpecValue bytes.
const (
	maxHello     = 8 << 10
	maxSpecItems = 64
	maxSpecFlag  = 64
	maxSpecValue = 256

	// ringSpecItems is the number of settings Config.hello puts before
	// Config.Spec (the ring's).
	ringSpecItems = 5
)

// SpecItem is one setting every peer of a job must share, as the flag that
// sets it and its value in the flag's own syntax ("dim", "1048576").
type SpecItem struct {
	Flag  string // the flag name without dashes: "dim", "model", "mode"
	Value string // its effective value, as the flag would take it
}

// Spec is what every peer of a job must agree on for training to work,
// beyond what Config checks itself (the ring settings, the message size):
// the model's kind, dimension, classes and hidden units, the mode, the
// optimizer… The CLI fills it from the model and flags; a peer with no
// model (gossiptrain peer) leaves it empty. Two peers compare the settings
// both of them name; one that only one names is not compared.
type Spec []SpecItem

// Validate checks the bounds the hello imposes.
func (s Spec) Validate() error {
	if len(s) > maxSpecItems {
		return fmt.Errorf("%d settings, at most %d", len(s), maxSpecItems)
	}
	seen := map[string]bool{}
	for _, it := range s {
		switch {
		case it.Flag == "" || len(it.Flag) > maxSpecFlag:
			return fmt.Errorf("setting name %q: want 1-%d bytes", it.Flag, maxSpecFlag)
		case len(it.Value) > maxSpecValue:
			return fmt.Errorf("--%s: a value of %d bytes, at most %d", it.Flag, len(it.Value), maxSpecValue)
		case seen[it.Flag]:
			return fmt.Errorf("--%s appears twice", it.Flag)
		}
		seen[it.Flag] = true
	}
	return nil
}

// hello is what a peer says about itself on connect.
type hello struct {
	Job            string // the peer's job
	MaxMessageSize uint64 // its gossipsub maximum message size
	WireVersion    byte   // gossip/wire Version it speaks
	Spec           Spec   // its job settings (the ring's, then Config.Spec)
	// V1 marks a hello of an older release (helloMagicV1): it has no
	// Spec.
	V1 bool
}

// appendHello appends h as one frame: uvarint body length, then the body
// "GTH2", uvarint MaxMessageSize, uvarint len(Job), Job, WireVersion,
// uvarint len(Spec), and per setting uvarint len(Flag), Flag, uvarint
// len(Value), Value.
func appendHello(dst []byte, h hello) []byte {
	body := make([]byte, 0, 64+len(h.Job)+32*len(h.Spec))
	body = append(body, helloMagic...)
	body = binary.AppendUvarint(body, h.MaxMessageSize)
	body = binary.AppendUvarint(body, uint64(len(h.Job)))
	body = append(body, h.Job...)
	body = append(body, h.WireVersion)
	body = binary.AppendUvarint(body, uint64(len(h.Spec)))
	for _, it := range h.Spec {
		body = binary.AppendUvarint(body, uint64(len(it.Flag)))
		body = append(body, it.Flag...)
		body = binary.AppendUvarint(body, uint64(len(it.Value)))
		body = append(body, it.Value...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	return append(dst, body...)
}

// parseHello parses a hello body (without its length prefix).
func parseHello(b []byte) (hello, error) {
	var h hello
	if len(b) < len(helloMagic) {
		return h, fmt.Errorf("%w: %d bytes, shorter than the magic", ErrHello, len(b))
	}
	switch string(b[:len(helloMagic)]) {
	case helloMagic:
	case helloMagicV1:
		h.V1 = true
	default:
		return h, fmt.Errorf("%w: does not start with %q", ErrHello, helloMagic)
	}
	pos := len(helloMagic)
	uvarint := func(what string, limit uint64) (uint64, error) {
		v, k := binary.Uvarint(b[pos:])
		if k <= 0 || v > limit {
			return 0, fmt.Errorf("%w: byte %d: bad %s", ErrHello, pos, what)
		}
		pos += k
		return v, nil
	}
	str := func(what string, limit uint64) (string, error) {
		n, err := uvarint(what+" length", limit)
		if err != nil {
			return "", err
		}
		if uint64(len(b)-pos) < n {
			return "", fmt.Errorf("%w: byte %d: %s of %d bytes past the end", ErrHello, pos, what, n)
		}
		s := string(b[pos : pos+int(n)])
		pos += int(n)
		return s, nil
	}
	size, err := uvarint("max message size", 1<<63)
	if err != nil {
		return h, err
	}
	job, err := str("job", maxJobLen)
	if err != nil {
		return h, err
	}
	if pos >= len(b) {
		return h, fmt.Errorf("%w: no wire version after the job", ErrHello)
	}
	h.MaxMessageSize, h.Job, h.WireVersion = size, job, b[pos]
	pos++
	if h.V1 {
		if pos != len(b) {
			return hello{}, fmt.Errorf("%w: %d bytes after the wire version", ErrHello, len(b)-pos)
		}
		return h, nil
	}
	n, err := uvarint("setting count", maxSpecItems)
	if err != nil {
		return hello{}, err
	}
	for range n {
		var it SpecItem
		if it.Flag, err = str("setting name", maxSpecFlag); err != nil {
			return hello{}, err
		}
		if it.Value, err = str("setting value", maxSpecValue); err != nil {
			return hello{}, err
		}
		h.Spec = append(h.Spec, it)
	}
	if pos != len(b) {
		return hello{}, fmt.Errorf("%w: %d bytes after the settings", ErrHello, len(b)-pos)
	}
	if err := h.Spec.Validate(); err != nil {
		return hello{}, fmt.Errorf("%w: %v", ErrHello, err)
	}
	return h, nil
}

// readHello reads one hello frame.
func readHello(r io.Reader) (hello, error) {
	br := bufio.NewReaderSize(r, 256)
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

// Mismatch is one setting two peers of a job disagree on.
type Mismatch struct {
	Setting      string // "--dim", or "wire version" for what no flag sets
	Ours, Theirs string // this peer's value and the other peer's
}

// IncompatibleError is a peer of this job refused at the hello because its
// settings differ from this peer's.
type IncompatibleError struct {
	Job        string
	Peer       string     // the other peer's ID ("" when not known)
	Mismatches []Mismatch // every setting that differs, in this peer's order
	// OldRelease is set when the peer runs an older release that does not
	// send its settings.
	OldRelease bool
}

// Error implements error, naming every setting that differs with both
// values: "--dim: this peer 1048576, peer 12D3…Ab3xyz 16777216; every
// peer of job "ctr1" must run with the same values".
func (e *IncompatibleError) Error() string {
	who := "the other peer"
	if e.Peer != "" {
		who = "peer " + ShortID(e.Peer)
	}
	if e.OldRelease {
		return fmt.Sprintf("%s runs an older gossiptrain release (its hello carries no job settings): run the same release on every peer of job %q", who, e.Job)
	}
	parts := make([]string, len(e.Mismatches))
	for i, m := range e.Mismatches {
		parts[i] = fmt.Sprintf("%s: this peer %s, %s %s", m.Setting, m.Ours, who, m.Theirs)
	}
	return fmt.Sprintf("%s; every peer of job %q must run with the same values", strings.Join(parts, "; "), e.Job)
}

// Unwrap makes errors.Is(err, ErrIncompatible) true.
func (e *IncompatibleError) Unwrap() error { return ErrIncompatible }

// ShortID shortens a peer ID for messages as "12D3…" and its last six
// characters; other strings are returned as they are.
func ShortID(id string) string {
	if len(id) > 16 {
		return id[:4] + "…" + id[len(id)-6:]
	}
	return id
}

// compatible says whether a peer that sent theirs may stay connected to one
// that sent ours. Peers of other jobs may share a swarm (they never share a
// topic), so only a peer of the same job is checked: its max message size,
// wire version and every setting both hellos name must be equal. The check
// is symmetric, so both sides refuse each other.
func compatible(ours, theirs hello) error {
	if theirs.Job != ours.Job {
		return nil
	}
	e := &IncompatibleError{Job: ours.Job}
	if theirs.WireVersion != ours.WireVersion {
		e.Mismatches = append(e.Mismatches, Mismatch{Setting: "wire version (run the same gossiptrain release everywhere)",
			Ours: strconv.Itoa(int(ours.WireVersion)), Theirs: strconv.Itoa(int(theirs.WireVersion))})
	}
	if theirs.MaxMessageSize != ours.MaxMessageSize {
		e.Mismatches = append(e.Mismatches, Mismatch{Setting: "--max-message-size",
			Ours: strconv.FormatUint(ours.MaxMessageSize, 10), Theirs: strconv.FormatUint(theirs.MaxMessageSize, 10)})
	}
	if len(e.Mismatches) == 0 && (theirs.V1 || ours.V1) {
		e.OldRelease = true
		return e
	}
	for _, o := range ours.Spec {
		for _, t := range theirs.Spec {
			if t.Flag == o.Flag && t.Value != o.Value {
				e.Mismatches = append(e.Mismatches, Mismatch{Setting: "--" + o.Flag, Ours: o.Value, Theirs: t.Value})
			}
		}
	}
	if len(e.Mismatches) == 0 {
		return nil
	}
	return e
}

// hello is what this node sends: the ring's settings (which decide who
// owns which shard, so every peer must compute the same ring), then
// Config.Spec.
func (c *Config) hello(master string) hello {
	spec := Spec{
		{Flag: "shards", Value: strconv.Itoa(c.Shards)},
		{Flag: "replicas", Value: strconv.Itoa(c.Replicas)},
		{Flag: "vnodes", Value: strconv.Itoa(c.VNodes)},
		{Flag: "topology", Value: string(c.Topology)},
	}
	if c.Topology == TopologyMaster {
		spec = append(spec, SpecItem{Flag: "master", Value: master})
	}
	for _, it := range c.Spec {
		if !spec.has(it.Flag) {
			spec = append(spec, it)
		}
	}
	return hello{Job: c.Job, MaxMessageSize: uint64(c.MaxMessageSize), WireVersion: wire.Version, Spec: spec}
}

func (s Spec) has(flag string) bool {
	for _, it := range s {
		if it.Flag == flag {
			return true
		}
	}
	return false
}
