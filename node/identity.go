package node

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// maxKeyFile bounds what LoadIdentity and LoadSwarmKey read: a marshalled
// Ed25519 key is 68 bytes and a swarm key file about 90.
const maxKeyFile = 4096

// LoadOrCreateIdentity returns the Ed25519 key in path, creating it first
// if the file does not exist (created reports that). The new file has mode
// 0600 and a missing parent directory is created with mode 0700. Two
// processes starting at once with the same path end up with the same key:
// the file is created exclusively and the loser loads the winner's.
func LoadOrCreateIdentity(path string) (key crypto.PrivKey, created bool, err error) {
	key, err = LoadIdentity(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	key, err = CreateIdentity(path, false)
	if errors.Is(err, ErrExists) {
		key, err = LoadIdentity(path)
		return key, false, err
	}
	return key, err == nil, err
}

// LoadIdentity reads an identity written by CreateIdentity (the libp2p
// protobuf encoding of an Ed25519 private key, as crypto.MarshalPrivateKey
// writes it). It refuses a file that group or others may access, or that
// does not hold an Ed25519 key, with an error that names the file and wraps
// ErrIdentity. A missing file gives an error wrapping fs.ErrNotExist.
func LoadIdentity(path string) (crypto.PrivKey, error) {
	raw, err := readSecret(path, "identity")
	if err != nil {
		return nil, err
	}
	key, err := crypto.UnmarshalPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not a libp2p private key (%v); move it away to create a new identity, or restore it from a backup", ErrIdentity, path, err)
	}
	if key.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("%w: %s holds a %v key; gossiptrain identities are Ed25519 (create one with 'gossiptrain keygen --identity FILE')", ErrIdentity, path, key.Type())
	}
	return key, nil
}

// CreateIdentity writes a new Ed25519 key to path with mode 0600, creating
// a missing parent directory with mode 0700. It fails with ErrExists if the
// file exists, unless overwrite is set.
func CreateIdentity(path string, overwrite bool) (crypto.PrivKey, error) {
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: generate key: %v", ErrIdentity, path, err)
	}
	raw, err := crypto.MarshalPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: marshal key: %v", ErrIdentity, path, err)
	}
	if err := writeSecret(path, raw, overwrite); err != nil {
		return nil, err
	}
	return key, nil
}

// readSecret reads a small key file after checking that only its owner may
// access it.
func readSecret(path, what string) ([]byte, error) {
	sentinel := ErrIdentity
	if what != "identity" {
		sentinel = ErrSwarmKey
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s file %s: %w", what, path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("%w: %v", sentinel, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sentinel, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", sentinel, path)
	}
	if perm := st.Mode().Perm(); runtime.GOOS != "windows" && perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o: a key must be readable by its owner only (chmod 600 %s)", sentinel, path, perm, path)
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", sentinel, path, err)
	}
	if len(raw) > maxKeyFile {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes: not a %s file", sentinel, path, maxKeyFile, what)
	}
	return raw, nil
}

// writeSecret creates path with mode 0600 (its directory with 0700 when
// missing) holding data. The data goes to a temporary file in the same
// directory first, so a crash never leaves a half-written key; it is then
// renamed over path (overwrite) or hard-linked to it, which fails with
// ErrExists if path exists.
func writeSecret(path string, data []byte, overwrite bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create directory for %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if err := writeSync(f, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if overwrite {
		return os.Rename(tmp, path)
	}
	// A hard link appears atomically with its full content and fails if the
	// name exists: concurrent creators never see a half-written key.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s (keep it, or pass --force to replace it)", ErrExists, path)
		}
		return err
	}
	return nil
}

func writeSync(f *os.File, data []byte) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
