package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// The run's swarm key. The file format is libp2p's (and node.LoadSwarmKey's):
// "/key/swarm/psk/1.0.0/", "/base16/", then 64 hex digits of a 32-byte key,
// one a line. It is written here rather than through package node so that
// cluster stays free of libp2p (docs/contracts.md); TestWriteSwarmKey
// checks that node.LoadSwarmKey reads what this writes.

// writeSwarmKey writes a new random swarm key to path with mode 0600,
// replacing any file there: through a temporary file renamed over path,
// so that a peer never reads half a key.
func writeSwarmKey(path string) error {
	psk := make([]byte, 32)
	if _, err := rand.Read(psk); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Chmod(0o600)
	if err == nil {
		_, err = fmt.Fprintf(f, "/key/swarm/psk/1.0.0/\n/base16/\n%s\n", hex.EncodeToString(psk))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// checkKeyFile checks that a swarm key file given to a run exists, is a
// regular file and is readable by its owner only, as every peer will
// demand; its content is the peers' to check.
func checkKeyFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o: a key must be readable by its owner only (chmod 600 %s)", path, perm, path)
	}
	return nil
}
