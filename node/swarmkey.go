package node

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/libp2p/go-libp2p/core/pnet"
)

// swarmKeyHeader starts every swarm key file: the multicodec path of a v1
// pre-shared key, then the encoding of the key that follows.
const swarmKeyHeader = "/key/swarm/psk/1.0.0/\n/base16/\n"

// EncodeSwarmKey returns psk in the standard swarm key file format that
// go-libp2p and IPFS read:
//
//	/key/swarm/psk/1.0.0/
//	/base16/
//	<64 hex digits>
func EncodeSwarmKey(psk pnet.PSK) []byte {
	return []byte(swarmKeyHeader + hex.EncodeToString(psk) + "\n")
}

// CreateSwarmKey writes a new random 32-byte pre-shared key to path in the
// standard format, mode 0600 (a missing directory is created with 0700). It
// fails with ErrExists if the file exists, unless overwrite is set.
func CreateSwarmKey(path string, overwrite bool) (pnet.PSK, error) {
	psk := make(pnet.PSK, 32)
	if _, err := rand.Read(psk); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSwarmKey, path, err)
	}
	if err := writeSecret(path, EncodeSwarmKey(psk), overwrite); err != nil {
		return nil, err
	}
	return psk, nil
}

// LoadSwarmKey reads a swarm key file (base16, base64 or bin encoding, as
// pnet.DecodeV1PSK accepts). It refuses a file that group or others may
// access, and names the file in every error (wrapping ErrSwarmKey, or
// fs.ErrNotExist for a missing file).
func LoadSwarmKey(path string) (pnet.PSK, error) {
	raw, err := readSecret(path, "swarm key")
	if err != nil {
		return nil, err
	}
	psk, err := pnet.DecodeV1PSK(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (want the format 'gossiptrain keygen --swarm FILE' writes: %q then 64 hex digits)", ErrSwarmKey, path, err, swarmKeyHeader)
	}
	return psk, nil
}

// swarmKey returns the configuration's swarm key: PSK, else the SwarmKey
// file's key, else nil (no key: a public swarm, loopback only).
func (c *Config) swarmKey() (pnet.PSK, error) {
	switch {
	case c.PSK != nil:
		return c.PSK, nil
	case c.SwarmKey != "":
		return LoadSwarmKey(c.SwarmKey)
	}
	return nil, nil
}
