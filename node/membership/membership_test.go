package membership

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

func testConfig(self string) Config {
	c := DefaultConfig()
	c.Self, c.Job, c.Incarnation = self, "job1", 100
	return c
}

func mustNew(t *testing.T, cfg Config) *Membership {
	t.Helper()
	m, err := New(cfg, epoch0)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// setHash computes View.SetHash from its documented definition.
func setHash(ids []string, incs []uint64) uint64 {
	var b []byte
	for i, id := range ids {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = binary.BigEndian.AppendUint64(b, incs[i])
	}
	return xxhash.Sum64(b)
}

func at(d time.Duration) time.Time { return epoch0.Add(d) }

func TestConfigValidate(t *testing.T) {
	mod := func(f func(*Config)) Config { c := testConfig("a"); f(&c); return c }
	tests := []struct {
		cfg   Config
		wText string // "" = valid
	}{
		{testConfig("a"), ""},
		{mod(func(c *Config) { c.Self = "" }), "Self is empty"},
		{mod(func(c *Config) { c.Self = strings.Repeat("x", 129) }), "MaxIDLen 128"},
		{mod(func(c *Config) { c.Job = "" }), "Job is empty"},
		{mod(func(c *Config) { c.Heartbeat = 0 }), "Heartbeat 0s"},
		{mod(func(c *Config) { c.DeadAfter = 900 * time.Millisecond }), "DeadAfter 900ms"},
		{mod(func(c *Config) { c.MinGap = time.Second }), "MinGap 1s"},
		{mod(func(c *Config) { c.MinPeers = 0 }), "MinPeers 0"},
		{mod(func(c *Config) { c.MinPeers = 5000 }), "MinPeers 5000"},
		{mod(func(c *Config) { c.MaxMembers = 0 }), "MaxMembers 0"},
		{mod(func(c *Config) { c.Forget = time.Second }), "Forget 1s"},
		{mod(func(c *Config) { c.Addrs = []string{""} }), "address 0"},
		{mod(func(c *Config) { c.MaxAddrs = 1; c.Addrs = []string{"x", "y"} }), "2 addresses"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		switch {
		case tt.wText == "" && err != nil:
			t.Errorf("valid config: %v", err)
		case tt.wText != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.wText)):
			t.Errorf("err = %v, want ErrConfig mentioning %q", err, tt.wText)
		}
	}
}

// beatFrom is a valid Alive beat from id.
func beatFrom(id string, inc, seq uint64) Beat {
	return Beat{Job: "job1", From: id, Incarnation: inc, Seq: seq, Epoch: 1, Kind: Alive}
}

func TestReceiveRejects(t *testing.T) {
	mod := func(f func(*Beat)) Beat { b := beatFrom("b", 1, 1); f(&b); return b }
	tests := []struct {
		name  string
		b     Beat
		w     Reason
		wErr  error
		wText string
	}{
		{"wrong job", mod(func(b *Beat) { b.Job = "other" }), ReasonJob, ErrWrongJob, `job "other"`},
		{"empty sender", mod(func(b *Beat) { b.From = "" }), ReasonMalformed, ErrMalformed, "empty sender"},
		{"long sender", mod(func(b *Beat) { b.From = strings.Repeat("b", 200) }), ReasonMalformed, ErrMalformed, "200 bytes"},
		{"own ID", mod(func(b *Beat) { b.From = "a" }), ReasonSelf, ErrSelf, "incarnation 1 (ours 100)"},
		{"kind 0", mod(func(b *Beat) { b.Kind = 0 }), ReasonMalformed, ErrMalformed, "unknown kind 0"},
		{"incarnation 0", mod(func(b *Beat) { b.Incarnation = 0 }), ReasonMalformed, ErrMalformed, "incarnation 0"},
		{"seq 0", mod(func(b *Beat) { b.Seq = 0 }), ReasonMalformed, ErrMalformed, "seq 0"},
		{"epoch 0", mod(func(b *Beat) { b.Epoch = 0 }), ReasonMalformed, ErrMalformed, "epoch 0"},
		{"epoch huge", mod(func(b *Beat) { b.Epoch = 1<<62 + 1 }), ReasonMalformed, ErrMalformed, "epoch 4611686018427387905"},
		{"too many members", mod(func(b *Beat) { b.Members = make([]string, 4097) }), ReasonMalformed, ErrMalformed, "4097 members"},
		{"unsorted members", mod(func(b *Beat) { b.Members = []string{"b", "a"} }), ReasonMalformed, ErrMalformed, "not strictly ascending at 1"},
		{"duplicate members", mod(func(b *Beat) { b.Members = []string{"a", "a"} }), ReasonMalformed, ErrMalformed, "not strictly ascending"},
		{"empty member", mod(func(b *Beat) { b.Members = []string{""} }), ReasonMalformed, ErrMalformed, "member 0 is empty"},
		{"too many addrs", mod(func(b *Beat) { b.Addrs = make([]string, 17) }), ReasonMalformed, ErrMalformed, "17 addresses"},
		{"long addr", mod(func(b *Beat) { b.Addrs = []string{strings.Repeat("/", 300)} }), ReasonMalformed, ErrMalformed, "address 0"},
	}
	for _, tt := range tests {
		m := mustNew(t, testConfig("a"))
		rd := m.Receive(tt.b, at(time.Millisecond))
		if len(rd.Rejected) != 1 {
			t.Errorf("%s: Rejected = %v, want one", tt.name, rd.Rejected)
			continue
		}
		r := rd.Rejected[0]
		if r.Reason != tt.w || !errors.Is(r.Err, tt.wErr) || !strings.Contains(r.Err.Error(), tt.wText) {
			t.Errorf("%s: rejection %v %v, want %v %v mentioning %q", tt.name, r.Reason, r.Err, tt.w, tt.wErr, tt.wText)
		}
		if st := m.Stats(); st.Rejected[tt.w] != 1 || st.Accepted != 0 || st.Received != 1 {
			t.Errorf("%s: stats %+v", tt.name, st)
		}
		if rd.Changed || len(rd.View.Members) != 1 {
			t.Errorf("%s: view changed to %v", tt.name, rd.View.Members)
		}
	}
}

// TestSenderHistory feeds one sender's beats in order and checks each
// verdict: replays, reordering, restarts, leaves and comebacks.
func TestSenderHistory(t *testing.T) {
	m := mustNew(t, testConfig("a"))
	steps := []struct {
		inc, seq uint64
		kind     BeatKind
		w        string // "joined", "restarted", "left", "ok" or a Reason
	}{
		{5, 1, Join, "joined"},
		{5, 1, Alive, "replay"},
		{5, 3, Alive, "ok"},     // seq gaps are fine (lost beats)
		{5, 2, Alive, "replay"}, // overtaken by seq 3
		{4, 9, Alive, "replay"}, // older incarnation
		{6, 1, Join, "restarted"},
		{5, 10, Alive, "replay"}, // the old process, still running
		{6, 2, Leave, "left"},
		{6, 3, Alive, "left"}, // sent after its own Leave
		{6, 2, Leave, "left"}, // the Leave again
		{7, 1, Join, "joined"},
		{6, 2, Leave, "replay"}, // the old Leave, replayed
		{7, 2, Alive, "ok"},
	}
	for i, s := range steps {
		b := beatFrom("b", s.inc, s.seq)
		b.Kind = s.kind
		rd := m.Receive(b, at(time.Duration(i+1)*time.Millisecond))
		got := "ok"
		switch {
		case len(rd.Rejected) > 0:
			got = rd.Rejected[0].Reason.String()
		case len(rd.Joined) > 0:
			got = "joined"
		case len(rd.Restarted) > 0:
			got = "restarted"
		case len(rd.Left) > 0:
			got = "left"
		}
		if got != s.w {
			t.Errorf("step %d (inc %d seq %d %s): got %s, want %s", i, s.inc, s.seq, s.kind, got, s.w)
		}
	}
	st := m.Stats()
	if st.Joins != 2 || st.Restarts != 1 || st.Leaves != 1 || st.Rejected[ReasonReplay] != 5 || st.Rejected[ReasonLeft] != 2 {
		t.Errorf("stats %+v", st)
	}
	if v := m.View(); !slices.Equal(v.Members, []string{"a", "b"}) || !slices.Equal(v.Incarnations, []uint64{100, 7}) {
		t.Errorf("view %v %v, want [a b] [100 7]", v.Members, v.Incarnations)
	}
}

// TestTimeline checks beat timing, the death deadline and Next with a fake
// clock: Heartbeat 500ms, DeadAfter 5s, MinGap 100ms.
func TestTimeline(t *testing.T) {
	m := mustNew(t, testConfig("a"))
	type want struct {
		send   string // "" or kind/seq/epoch, e.g. "join/1/1"
		next   time.Duration
		died   string
		member int
	}
	steps := []struct {
		at   time.Duration
		beat *Beat // nil: Tick
		w    want
	}{
		{0, nil, want{"join/1/1", 500 * time.Millisecond, "", 1}},
		{499 * time.Millisecond, nil, want{"", 500 * time.Millisecond, "", 1}},
		{500 * time.Millisecond, nil, want{"alive/2/1", time.Second, "", 1}},
		// b appears 10ms after a beat: the view changes, but MinGap holds
		// the beat until 600ms.
		{510 * time.Millisecond, &Beat{Job: "job1", From: "b", Incarnation: 1, Seq: 1, Epoch: 1, Kind: Join}, want{"", 600 * time.Millisecond, "", 2}},
		{600 * time.Millisecond, nil, want{"alive/3/2", 1100 * time.Millisecond, "", 2}},
		// The driver missed the Ticks due since 1.1s: one beat, not a
		// burst. b's deadline, 5.51s, now comes before the next beat.
		{5100 * time.Millisecond, nil, want{"alive/4/2", 5510 * time.Millisecond, "", 2}},
		{5509 * time.Millisecond, nil, want{"", 5510 * time.Millisecond, "", 2}},
		// b dies: a new view (epoch 3), sent at once (MinGap since 5.1s).
		{5510 * time.Millisecond, nil, want{"alive/5/3", 6010 * time.Millisecond, "b", 1}},
	}
	for _, s := range steps {
		var rd Ready
		if s.beat != nil {
			rd = m.Receive(*s.beat, at(s.at))
		} else {
			rd = m.Tick(at(s.at))
		}
		send := ""
		if len(rd.Send) > 0 {
			b := rd.Send[0]
			send = fmt.Sprintf("%s/%d/%d", b.Kind, b.Seq, b.Epoch)
		}
		got := want{send, rd.Next.Sub(epoch0), strings.Join(rd.Died, ","), len(rd.View.Members)}
		if got != s.w {
			t.Errorf("at %v: got %+v, want %+v", s.at, got, s.w)
		}
	}
}

// TestViewAndEpochRule builds views by hand: SetHash from its definition,
// and the epoch rule (adopt a higher epoch announced for our exact set;
// otherwise one more than any epoch seen).
func TestViewAndEpochRule(t *testing.T) {
	m := mustNew(t, testConfig("a"))
	v := m.View()
	if v.Epoch != 1 || v.SetHash != setHash([]string{"a"}, []uint64{100}) {
		t.Fatalf("initial view %+v", v)
	}
	ab := setHash([]string{"a", "b"}, []uint64{100, 7})
	abc := setHash([]string{"a", "b", "c"}, []uint64{100, 7, 9})
	steps := []struct {
		b       Beat
		wEpoch  uint64
		wHash   uint64
		wAgreed bool
	}{
		// b announces some other set at epoch 4: our set {a,b} is new and
		// nobody announces it, so max(1, 4)+1 = 5.
		{Beat{From: "b", Incarnation: 7, Seq: 1, Epoch: 4, SetHash: 1}, 5, ab, false},
		// b announces our set at 9: adopt.
		{Beat{From: "b", Incarnation: 7, Seq: 2, Epoch: 9, SetHash: ab}, 9, ab, true},
		// b announces our set at a lower epoch: keep ours; not agreed.
		{Beat{From: "b", Incarnation: 7, Seq: 3, Epoch: 8, SetHash: ab}, 9, ab, false},
		// c joins announcing {a,b,c} at 12: our new set is exactly that,
		// 12 > 9, so take 12 directly.
		{Beat{From: "c", Incarnation: 9, Seq: 1, Epoch: 12, SetHash: abc}, 12, abc, false},
		{Beat{From: "b", Incarnation: 7, Seq: 4, Epoch: 12, SetHash: abc}, 12, abc, true},
	}
	for i, s := range steps {
		s.b.Job, s.b.Kind = "job1", Alive
		rd := m.Receive(s.b, at(time.Duration(i+1)*time.Millisecond))
		if len(rd.Rejected) > 0 {
			t.Fatalf("step %d: %v", i, rd.Rejected[0].Err)
		}
		if rd.View.Epoch != s.wEpoch || rd.View.SetHash != s.wHash || rd.Agreed != s.wAgreed {
			t.Errorf("step %d: epoch %d hash %x agreed %v, want %d %x %v", i, rd.View.Epoch, rd.View.SetHash, rd.Agreed, s.wEpoch, s.wHash, s.wAgreed)
		}
	}
}

func TestLeaveStopsBeats(t *testing.T) {
	m := mustNew(t, testConfig("a"))
	m.Tick(epoch0)
	rd := m.Leave(at(100 * time.Millisecond))
	if len(rd.Send) != 1 || rd.Send[0].Kind != Leave || rd.Send[0].Seq != 2 {
		t.Fatalf("Leave sent %+v, want one Leave with seq 2", rd.Send)
	}
	if rd = m.Tick(at(10 * time.Second)); len(rd.Send) != 0 || !rd.Next.IsZero() {
		t.Errorf("after Leave, Tick sent %+v, Next %v", rd.Send, rd.Next)
	}
	if rd = m.Leave(at(11 * time.Second)); len(rd.Send) != 1 || rd.Send[0].Seq != 3 {
		t.Errorf("second Leave sent %+v, want seq 3", rd.Send)
	}
}

func TestFull(t *testing.T) {
	cfg := testConfig("a")
	cfg.MaxMembers = 2
	m := mustNew(t, cfg)
	if rd := m.Receive(beatFrom("b", 1, 1), at(1)); len(rd.Joined) != 1 {
		t.Fatalf("b not joined: %+v", rd)
	}
	rd := m.Receive(beatFrom("c", 1, 1), at(2))
	if len(rd.Rejected) != 1 || rd.Rejected[0].Reason != ReasonFull || !errors.Is(rd.Rejected[0].Err, ErrFull) {
		t.Fatalf("c: %+v, want a ReasonFull rejection", rd.Rejected)
	}
	// A Leave from an unknown peer is no join: accepted, nothing changes.
	b := beatFrom("d", 1, 1)
	b.Kind = Leave
	if rd := m.Receive(b, at(3)); len(rd.Rejected) != 0 || rd.Changed {
		t.Errorf("Leave from a stranger: %+v", rd)
	}
}

func TestDial(t *testing.T) {
	m := mustNew(t, testConfig("a"))
	b := beatFrom("b", 1, 1)
	b.Addrs = []string{"/ip4/1.2.3.4/tcp/1"}
	steps := []struct {
		addrs []string
		w     []string
	}{
		{[]string{"/ip4/1.2.3.4/tcp/1"}, []string{"/ip4/1.2.3.4/tcp/1"}}, // joined
		{[]string{"/ip4/1.2.3.4/tcp/1"}, nil},                            // same again
		{[]string{"/ip4/1.2.3.4/tcp/2", "/ip6/::1/tcp/2"}, []string{"/ip4/1.2.3.4/tcp/2", "/ip6/::1/tcp/2"}},
	}
	for i, s := range steps {
		b.Seq, b.Addrs = uint64(i+1), s.addrs
		if rd := m.Receive(b, at(time.Duration(i+1))); !slices.Equal(rd.Dial, s.w) {
			t.Errorf("step %d: Dial %v, want %v", i, rd.Dial, s.w)
		}
	}
	if err := m.SetAddrs([]string{""}); !errors.Is(err, ErrConfig) {
		t.Errorf("SetAddrs with an empty address: %v", err)
	}
	if err := m.SetAddrs([]string{"/ip4/9.9.9.9/tcp/9"}); err != nil {
		t.Fatal(err)
	}
	if rd := m.Tick(at(time.Second)); len(rd.Send) != 1 || !slices.Equal(rd.Send[0].Addrs, []string{"/ip4/9.9.9.9/tcp/9"}) {
		t.Errorf("beat after SetAddrs: %+v", rd.Send)
	}
}

// TestForget: a departed peer's record goes after Forget; its old
// incarnation is then unknown again (the gossipsub seen-cache, 2 minutes,
// has long stopped replays by then).
func TestForget(t *testing.T) {
	cfg := testConfig("a")
	m := mustNew(t, cfg)
	m.Receive(beatFrom("b", 1, 1), at(1))
	b := beatFrom("b", 1, 2)
	b.Kind = Leave
	m.Receive(b, at(2))
	if rd := m.Receive(beatFrom("b", 1, 3), at(cfg.Forget)); len(rd.Rejected) != 1 || rd.Rejected[0].Reason != ReasonLeft {
		t.Fatalf("before Forget: %+v, want ReasonLeft", rd.Rejected)
	}
	m.Tick(at(cfg.Forget + 2))
	if rd := m.Receive(beatFrom("b", 1, 3), at(cfg.Forget+3)); len(rd.Joined) != 1 {
		t.Errorf("after Forget: %+v, want b joined", rd)
	}
}

func TestClockNeverGoesBack(t *testing.T) {
	m := mustNew(t, testConfig("a"))
	m.Tick(at(time.Second))
	m.Receive(beatFrom("b", 1, 1), at(2*time.Second))
	// A stale time is read as "now = the latest time seen": b heard at 2s
	// must not be declared dead at 2s+DeadAfter-1ms because of it.
	m.Tick(at(0))
	if rd := m.Tick(at(2*time.Second + 5*time.Second - time.Millisecond)); len(rd.Died) != 0 {
		t.Errorf("b died early: %v", rd.Died)
	}
}
