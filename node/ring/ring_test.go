package ring

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/quick"
)

// posHash reads ring positions straight out of the key so tests can be
// checked by hand: "shard#s" sits at 10*s+5, and point i of member "m" (a
// decimal number) sits at m + 1000*i.
func posHash(b []byte) uint64 {
	k := string(b)
	j := strings.LastIndexByte(k, '#')
	n, err := strconv.Atoi(k[j+1:])
	if err != nil {
		panic("posHash: bad key " + k)
	}
	if k[:j] == "shard" {
		return uint64(10*n + 5)
	}
	m, err := strconv.Atoi(k[:j])
	if err != nil {
		panic("posHash: member is not a number: " + k)
	}
	return uint64(m + 1000*n)
}

func handConfig(vnodes, shards, replicas, pct int) Config {
	return Config{VNodes: vnodes, Shards: shards, Replicas: replicas, MaxLoadPercent: pct, Hash: posHash}
}

func TestOwnersByHand(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		members []string
		wOwners [][]string // per shard
	}{
		{
			// points 10 20 30; shards at 5 15 25 35 (35 wraps to 10)
			name: "one point each", cfg: handConfig(1, 4, 1, 0), members: []string{"10", "20", "30"},
			wOwners: [][]string{{"10"}, {"20"}, {"30"}, {"10"}},
		},
		{
			name: "insertion order and duplicates do not matter", cfg: handConfig(1, 4, 1, 0),
			members: []string{"30", "10", "20", "10"},
			wOwners: [][]string{{"10"}, {"20"}, {"30"}, {"10"}},
		},
		{
			name: "two replicas walk on clockwise", cfg: handConfig(1, 4, 2, 0), members: []string{"10", "20", "30"},
			wOwners: [][]string{{"10", "20"}, {"20", "30"}, {"30", "10"}, {"10", "20"}},
		},
		{
			name: "replicas capped by member count", cfg: handConfig(1, 4, 5, 0), members: []string{"10", "20"},
			wOwners: [][]string{{"10", "20"}, {"20", "10"}, {"10", "20"}, {"10", "20"}},
		},
		{
			// points 10 20 1010 1020: shards 25 and 35 fall on 1010
			name: "second vnode", cfg: handConfig(2, 4, 1, 0), members: []string{"10", "20"},
			wOwners: [][]string{{"10"}, {"20"}, {"10"}, {"10"}},
		},
		{
			// "05#0" and "5#0" both sit at 5, exactly where shard 0 is:
			// a point at the shard's position owns it; ties go by ID.
			name: "tie broken by member ID", cfg: handConfig(1, 1, 2, 0), members: []string{"5", "05"},
			wOwners: [][]string{{"05", "5"}},
		},
		{
			// plain: 5->10, 15 25 35 -> 40. Capacity ceil(4/2) = 2: shard 3
			// finds 40 full and walks on (wrapping) to 10.
			name: "bounded load", cfg: handConfig(1, 4, 1, 100), members: []string{"10", "40"},
			wOwners: [][]string{{"10"}, {"40"}, {"40"}, {"10"}},
		},
		{
			// standby = primary the shard gets if the primary leaves; with
			// one member left, that is the other member.
			name: "bounded load with standby", cfg: handConfig(1, 4, 2, 100), members: []string{"10", "40"},
			wOwners: [][]string{{"10", "40"}, {"40", "10"}, {"40", "10"}, {"10", "40"}},
		},
		{
			// 125%: T = 5 capacity units; 40's point 0 comes first, so 40
			// may hold 3 and 1010 2. Shards 5..35 all fall on 40; the
			// fourth finds it full and walks on to 1010.
			name: "bounded load 125%", cfg: handConfig(1, 4, 1, 125), members: []string{"40", "1010"},
			wOwners: [][]string{{"40"}, {"40"}, {"40"}, {"1010"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg, tt.members)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]string
			for s := range r.Shards() {
				got = append(got, slices.Clone(r.Owners(s)))
				if r.Primary(s) != r.Owners(s)[0] {
					t.Errorf("Primary(%d) = %s, Owners[0] = %s", s, r.Primary(s), r.Owners(s)[0])
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.wOwners) {
				t.Errorf("owners = %v, want %v", got, tt.wOwners)
			}
		})
	}
}

func TestQueriesByHand(t *testing.T) {
	// owners: [10 20] [20 30] [30 10] [10 20]
	r, err := New(handConfig(1, 4, 2, 0), []string{"30", "20", "10"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		member              string
		wOwned, wReplicated []int
	}{
		{"10", []int{0, 3}, []int{0, 2, 3}},
		{"20", []int{1}, []int{0, 1, 3}},
		{"30", []int{2}, []int{1, 2}},
		{"99", nil, nil},
	}
	for _, tt := range tests {
		if got := r.Owned(tt.member); !slices.Equal(got, tt.wOwned) {
			t.Errorf("Owned(%s) = %v, want %v", tt.member, got, tt.wOwned)
		}
		if got := r.Replicated(tt.member); !slices.Equal(got, tt.wReplicated) {
			t.Errorf("Replicated(%s) = %v, want %v", tt.member, got, tt.wReplicated)
		}
	}
	if got, w := r.Members(), []string{"10", "20", "30"}; !slices.Equal(got, w) {
		t.Errorf("Members = %v, want %v", got, w)
	}
	if got, w := r.Assignment(), []string{"10", "20", "30", "10"}; !slices.Equal(got, w) {
		t.Errorf("Assignment = %v, want %v", got, w)
	}
	// Copies: changing them must not change the ring.
	r.Members()[0] = "x"
	r.Assignment()[0] = "x"
	if r.Primary(0) != "10" || r.Members()[0] != "10" {
		t.Error("Members/Assignment alias the ring")
	}
}

func TestMovedByHand(t *testing.T) {
	cfg := handConfig(1, 4, 1, 0)
	abc, _ := New(cfg, []string{"10", "20", "30"}) // 10 20 30 10
	ac, _ := New(cfg, []string{"10", "30"})        // 10 30 30 10
	c, _ := New(cfg, []string{"30"})
	big, _ := New(handConfig(1, 8, 1, 0), []string{"10"})
	tests := []struct {
		name string
		a, b *Ring
		w    []int
	}{
		{"same", abc, abc, nil},
		{"remove 20", abc, ac, []int{1}},
		{"add 20", ac, abc, []int{1}},
		{"to one member", abc, c, []int{0, 1, 3}},
		{"from nothing", nil, ac, []int{0, 1, 2, 3}},
		{"to nothing", ac, nil, []int{0, 1, 2, 3}},
		{"different shard counts", abc, big, []int{0, 1, 2, 3, 4, 5, 6, 7}},
	}
	for _, tt := range tests {
		if got := Moved(tt.a, tt.b); !slices.Equal(got, tt.w) {
			t.Errorf("%s: Moved = %v, want %v", tt.name, got, tt.w)
		}
	}
}

func TestMaster(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Replicas = 3
	r := Master(cfg, "boss")
	for s := range cfg.Shards {
		if o := r.Owners(s); len(o) != 1 || o[0] != "boss" {
			t.Fatalf("Owners(%d) = %v, want [boss]", s, o)
		}
	}
	if got := len(r.Owned("boss")); got != cfg.Shards {
		t.Errorf("boss owns %d shards, want %d", got, cfg.Shards)
	}
}

func TestNewErrors(t *testing.T) {
	good := DefaultConfig()
	mod := func(f func(*Config)) Config { c := good; f(&c); return c }
	tests := []struct {
		name    string
		cfg     Config
		members []string
		w       error
		wText   string
	}{
		{"no members", good, nil, ErrNoMembers, ""},
		{"empty ID", good, []string{"a", ""}, ErrBadMember, ""},
		{"zero vnodes", mod(func(c *Config) { c.VNodes = 0 }), []string{"a"}, ErrConfig, "VNodes 0"},
		{"shards not power of two", mod(func(c *Config) { c.Shards = 100 }), []string{"a"}, ErrConfig, "Shards 100"},
		{"zero shards", mod(func(c *Config) { c.Shards = 0 }), []string{"a"}, ErrConfig, "Shards 0"},
		{"zero replicas", mod(func(c *Config) { c.Replicas = 0 }), []string{"a"}, ErrConfig, "Replicas 0"},
		{"load below mean", mod(func(c *Config) { c.MaxLoadPercent = 99 }), []string{"a"}, ErrConfig, "MaxLoadPercent 99"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg, tt.members)
		if !errors.Is(err, tt.w) || !strings.Contains(fmt.Sprint(err), tt.wText) {
			t.Errorf("%s: err = %v, want %v mentioning %q", tt.name, err, tt.w, tt.wText)
		}
	}
	if _, err := New(mod(func(c *Config) { c.Hash = nil }), []string{"a"}); err != nil {
		t.Errorf("nil Hash should mean xxhash: %v", err)
	}
}

// peerIDs returns n distinct IDs shaped like libp2p peer IDs.
func peerIDs(rng *rand.Rand, n int) []string {
	const alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		b := []byte("12D3KooW")
		for range 44 {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		if id := string(b); !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// modes are the placement rules every property must hold for (or be
// measured under): plain consistent hashing, the default exact bound and a
// looser one.
var modes = []struct {
	name string
	pct  int
}{{"plain", 0}, {"bounded100", 100}, {"bounded125", 125}}

func TestOrderIrrelevant(t *testing.T) {
	for _, mode := range modes {
		cfg := DefaultConfig()
		cfg.Replicas = 3
		cfg.MaxLoadPercent = mode.pct
		f := func(seed uint64, n uint8) bool {
			rng := rand.New(rand.NewPCG(seed, 1))
			ids := peerIDs(rng, 1+int(n%24))
			a, err := New(cfg, ids)
			if err != nil {
				t.Fatal(err)
			}
			shuffled := slices.Clone(ids)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			shuffled = append(shuffled, shuffled[:len(shuffled)/2]...) // duplicates
			b, err := New(cfg, shuffled)
			if err != nil {
				t.Fatal(err)
			}
			for s := range cfg.Shards {
				if !slices.Equal(a.Owners(s), b.Owners(s)) {
					return false
				}
				o := a.Owners(s)
				if len(o) != min(3, len(ids)) || len(slices.Compact(slices.Sorted(slices.Values(o)))) != len(o) {
					t.Errorf("%s: shard %d owners %v not %d distinct members", mode.name, s, o, min(3, len(ids)))
				}
			}
			return slices.Equal(a.Assignment(), b.Assignment())
		}
		if err := quick.Check(f, &quick.Config{MaxCount: 40}); err != nil {
			t.Errorf("%s: %v", mode.name, err)
		}
	}
}

// TestConcurrentReads backs the "safe for concurrent use" promise; run with
// -race.
func TestConcurrentReads(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Replicas = 2
	r, err := New(cfg, []string{"a", "b", "c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	want := r.Assignment()
	done := make(chan bool)
	for range 4 {
		go func() {
			ok := true
			for s := range cfg.Shards {
				ok = ok && r.Primary(s) == want[s] && r.Owners(s)[0] == want[s]
			}
			_ = r.Owned("a")
			_ = Moved(r, r)
			done <- ok
		}()
	}
	for range 4 {
		if !<-done {
			t.Error("concurrent reads disagree")
		}
	}
}
