package node

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func idOf(t *testing.T, k crypto.PrivKey) peer.ID {
	t.Helper()
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestIdentityCreatedOnceThenLoaded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new-dir", "key")
	k1, created, err := LoadOrCreateIdentity(path)
	if err != nil || !created {
		t.Fatalf("first run: created=%v err=%v, want a new key", created, err)
	}
	if k1.Type() != crypto.Ed25519 {
		t.Errorf("key type %v, want Ed25519", k1.Type())
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("key file mode %04o, want 0600", m)
	}
	if m := mode(t, filepath.Dir(path)); m != 0o700 {
		t.Errorf("created directory mode %04o, want 0700", m)
	}
	k2, created, err := LoadOrCreateIdentity(path)
	if err != nil || created {
		t.Fatalf("second run: created=%v err=%v, want the same key loaded", created, err)
	}
	if idOf(t, k1) != idOf(t, k2) {
		t.Errorf("peer ID changed across runs: %s then %s", idOf(t, k1), idOf(t, k2))
	}
}

func TestIdentityConcurrentCreateAgrees(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	const n = 8
	ids := make([]peer.ID, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k, _, err := LoadOrCreateIdentity(path)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = idOf(t, k)
		})
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if ids[i] != ids[0] {
			t.Fatalf("process %d got %s, process 0 got %s: racing starts must share one identity", i, ids[i], ids[0])
		}
	}
}

func TestIdentityRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	secp, _, err := crypto.GenerateSecp256k1Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secpRaw, err := crypto.MarshalPrivateKey(secp)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	if _, err := CreateIdentity(good, false); err != nil {
		t.Fatal(err)
	}
	goodRaw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		perm fs.FileMode
		want string
	}{
		{"group readable", goodRaw, 0o640, "mode 0640"},
		{"world readable", goodRaw, 0o604, "chmod 600"},
		{"garbage", []byte("not a key at all"), 0o600, "not a libp2p private key"},
		{"empty", nil, 0o600, "not a libp2p private key"},
		{"truncated", goodRaw[:len(goodRaw)/2], 0o600, "not a libp2p private key"},
		{"secp256k1 key", secpRaw, 0o600, "Ed25519"},
		{"huge", bytes.Repeat([]byte{1}, maxKeyFile+1), 0o600, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if err := os.WriteFile(path, tt.data, tt.perm); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.perm); err != nil { // umask-proof
				t.Fatal(err)
			}
			_, err := LoadIdentity(path)
			if !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadIdentity = %v, want ErrIdentity naming %s and containing %q", err, path, tt.want)
			}
			// LoadOrCreate must not paper over a bad file with a new identity.
			if _, _, err := LoadOrCreateIdentity(path); !errors.Is(err, ErrIdentity) {
				t.Errorf("LoadOrCreateIdentity = %v, want ErrIdentity", err)
			}
		})
	}
	if _, err := LoadIdentity(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestCreateIdentityOverwrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	k1, err := CreateIdentity(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateIdentity(path, false); !errors.Is(err, ErrExists) {
		t.Fatalf("second create without overwrite: %v, want ErrExists", err)
	}
	k2, err := CreateIdentity(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if idOf(t, k1) == idOf(t, k2) {
		t.Error("overwrite kept the old key")
	}
	loaded, err := LoadIdentity(path)
	if err != nil || idOf(t, loaded) != idOf(t, k2) {
		t.Errorf("after overwrite the file holds %v (err %v), want the new key", loaded, err)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("overwritten file mode %04o, want 0600", m)
	}
}

func TestSwarmKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "swarm.key")
	psk, err := CreateSwarmKey(path, false)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	if len(lines) != 4 || lines[0] != "/key/swarm/psk/1.0.0/" || lines[1] != "/base16/" || len(lines[2]) != 64 || lines[3] != "" {
		t.Errorf("swarm key file %q: want the header, /base16/ and 64 hex digits", raw)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("mode %04o, want 0600", m)
	}
	got, err := LoadSwarmKey(path)
	if err != nil || !bytes.Equal(got, psk) {
		t.Fatalf("LoadSwarmKey = %x, %v; want %x", got, err, psk)
	}
	if _, err := CreateSwarmKey(path, false); !errors.Is(err, ErrExists) {
		t.Errorf("create over an existing key: %v, want ErrExists", err)
	}

	// A key written by another tool in base64 also loads; 32 bytes of 0x01.
	b64 := filepath.Join(dir, "b64.key")
	text := "/key/swarm/psk/1.0.0/\n/base64/\nAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"
	if err := os.WriteFile(b64, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadSwarmKey(b64); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{1}, 32)) {
		t.Errorf("base64 key: %x, %v", got, err)
	}

	bad := []struct {
		name, text string
		perm       fs.FileMode
		want       string
	}{
		{"wrong header", "/key/swarm/psk/2.0.0/\n/base16/\n" + strings.Repeat("ab", 32) + "\n", 0o600, "gossiptrain keygen --swarm"},
		{"short key", swarmKeyHeader + "abcd\n", 0o600, "gossiptrain keygen --swarm"},
		{"not hex", swarmKeyHeader + strings.Repeat("zz", 32) + "\n", 0o600, "gossiptrain keygen --swarm"},
		{"readable by others", string(EncodeSwarmKey(psk)), 0o644, "chmod 600"},
	}
	for _, tt := range bad {
		p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
		if err := os.WriteFile(p, []byte(tt.text), tt.perm); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, tt.perm)
		_, err := LoadSwarmKey(p)
		if !errors.Is(err, ErrSwarmKey) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: LoadSwarmKey = %v, want ErrSwarmKey naming the file and %q", tt.name, err, tt.want)
		}
	}
}
