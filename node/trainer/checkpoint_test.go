package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// ckptRun runs 3 sync peers on 1000 rows each (batch 20, 2 epochs: 100
// rounds). tweak adjusts peer i's configuration; stop, when set, is
// polled while they run and cancels them all when it says so.
func ckptRun(t *testing.T, tweak func(i int, cfg *Config), stop func() bool) ([]Summary, []error) {
	t.Helper()
	const n, dim = 3, 500
	ml := &memLink{peers: map[string]*Trainer{}}
	names := make([]string, n)
	var initial []train.Member
	for i := range names {
		names[i] = fmt.Sprintf("peer%02d", i)
		initial = append(initial, train.Member{Peer: names[i], ID: train.MemberID(names[i], 1)})
	}
	rcfg := ring.DefaultConfig()
	rcfg.Shards = 16
	place := func(members []string) (train.Placement, error) { return ring.New(rcfg, members) }
	test := planted(1000, 300, dim, 5)
	trainers := make([]*Trainer, n)
	for i, name := range names {
		cfg := DefaultConfig()
		cfg.Core.Self, cfg.Core.ID = name, train.MemberID(name, 1)
		cfg.Core.Model, cfg.Core.Place, cfg.Core.Initial = newModel(t, dim), place, initial
		cfg.Core.Seed = uint64(i + 1)
		cfg.Batch, cfg.Epochs, cfg.Tick = 20, 2, time.Millisecond
		cfg.Job = "ckpt-test"
		// A leader (who schedules checkpoints) within the first rounds of
		// a run that lasts a few hundred 1ms ticks.
		cfg.Core.Raft.Every, cfg.Core.Raft.ElectionTicks = 1, 5
		tweak(i, &cfg)
		tr, err := New(cfg, Hooks{}, link{ml, name})
		if err != nil {
			t.Fatal(err)
		}
		trainers[i] = tr
		ml.peers[name] = tr
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	sums := make([]Summary, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, tr := range trainers {
		rows := planted(uint64(i+1), 1000, dim, 5)
		ids := make([]uint64, n)
		for j := range ids {
			ids[j] = initial[j].ID
		}
		tr.SetAlive(ids)
		wg.Go(func() {
			// Reading takes 3ms a batch, so a run lasts a few hundred
			// 1ms ticks: the leader, which schedules checkpoints, is
			// elected within its first rounds, not after its end.
			open := func(int) (data.Source, error) { return &slowSource{rowsSource{b: rows}, 3 * time.Millisecond}, nil }
			testSrc := func() (data.Source, error) { return &rowsSource{b: test}, nil }
			sums[i], errs[i] = tr.Run(ctx, open, ReadTestSet(tr.m, testSrc))
		})
	}
	if stop != nil {
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		tk := time.NewTicker(2 * time.Millisecond)
		defer tk.Stop()
	poll:
		for {
			select {
			case <-done:
				break poll
			case <-tk.C:
				if stop() {
					cancel()
					break poll
				}
			}
		}
	}
	wg.Wait()
	return sums, errs
}

// A sync run stopped after a checkpoint and resumed from it ends with the
// model an uninterrupted run ends with, bit for bit: the checkpoint holds
// every shard's weights and optimizer state as of the end of its round's
// previous round, and each worker's data position.
func TestCheckpointResumeIsBitIdentical(t *testing.T) {
	ref, errs := ckptRun(t, func(int, *Config) {}, nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("uninterrupted run, peer %d: %v", i, err)
		}
	}
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	sums, errs := ckptRun(t, func(i int, cfg *Config) {
		cfg.CheckpointDir, cfg.CheckpointKeep = dirs[i], 1000
		cfg.Core.CheckpointTicks = 3
	}, nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("run with checkpoints, peer %d: %v", i, err)
		}
		if sums[i].Checkpoints == 0 {
			t.Errorf("peer %d: summary says %d checkpoints written", i, sums[i].Checkpoints)
		}
		if sums[i].ModelHash != ref[0].ModelHash {
			t.Errorf("peer %d: a run with checkpoints ends with model %x, without %x", i, sums[i].ModelHash, ref[0].ModelHash)
		}
	}
	// A round every peer has, half way if there is one.
	var lists [3][]CheckpointInfo
	common := map[uint64]int{}
	for i, d := range dirs {
		lists[i], _ = ListCheckpoints(d)
		for _, c := range lists[i] {
			common[c.Round]++
		}
	}
	var r uint64
	for round, k := range common {
		if k == 3 && (r == 0 || absDiff(round, 50) < absDiff(r, 50)) {
			r = round
		}
	}
	if r == 0 {
		t.Fatalf("no checkpoint round common to the 3 peers: %v", common)
	}
	var shards []int
	resumed, errs := ckptRun(t, func(i int, cfg *Config) {
		info, err := LoadCheckpoint(ckptPath(dirs[i], r), cfg.Core.Model)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Worker || info.Round != r || len(info.Members) != 3 {
			t.Fatalf("peer %d: checkpoint %+v, want a worker's of round %d with 3 members", i, info, r)
		}
		shards = append(shards, info.Shards...)
		cfg.Core.Start, cfg.Resume = r, &info
	}, nil)
	slices.Sort(shards)
	if len(shards) != 16 || slices.Compact(shards)[15] != 15 {
		t.Errorf("the checkpoint files hold shards %v, want each of the 16 once", shards)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("resumed run, peer %d: %v", i, err)
		}
		s := resumed[i]
		if s.ResumedAt != r {
			t.Errorf("peer %d: resumed at %d, want %d", i, s.ResumedAt, r)
		}
		if s.ModelHash != ref[0].ModelHash {
			t.Errorf("peer %d: resumed at round %d ends with model %x, the uninterrupted run with %x", i, r, s.ModelHash, ref[0].ModelHash)
		}
		if want := 2000 - int64(20*(r)); s.Examples != want {
			t.Errorf("peer %d trained %d examples after round %d, want %d", i, s.Examples, r, want)
		}
	}
	t.Logf("resumed at round %d of 100: model %x as uninterrupted", r, resumed[0].ModelHash)
}

func absDiff(a, b uint64) uint64 { return max(a, b) - min(a, b) }

// A full disk at checkpoint time: the write fails with the disk's error,
// leaves no file behind, and the checkpoints already there stay whole.
func TestCheckpointFullDiskKeepsThePreviousOne(t *testing.T) {
	dir := t.TempDir()
	m := newModel(t, 500)
	shards := map[int][]byte{}
	for s := range 4 {
		m.Own(s)
		lo, _ := m.Layout.ShardRange(s)
		m.W[lo] = float32(s) + 0.5
		shards[s] = m.AppendShard(nil, s, true)
	}
	info := CheckpointInfo{Job: "j", Peer: "p", Round: 7, Members: []string{"p"}, Worker: true, Model: modelDesc(m)}
	if err := writeCheckpoint(dir, info, shards, 2, nil); err != nil {
		t.Fatal(err)
	}
	info.Round = 9
	full := func(w io.Writer) io.Writer { return &fullDisk{w: w, left: 100} }
	err := writeCheckpoint(dir, info, shards, 2, full)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full disk: %v, want ENOSPC", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "round-7.ckpt" {
		t.Errorf("after the failed write the directory holds %v, want round-7.ckpt only", ents)
	}
	m2 := newModel(t, 500)
	got, err := LoadCheckpoint(filepath.Join(dir, "round-7.ckpt"), m2)
	if err != nil {
		t.Fatal(err)
	}
	lo2, _ := m2.Layout.ShardRange(2)
	if got.Round != 7 || !slices.Equal(got.Shards, []int{0, 1, 2, 3}) || m2.W[lo2] != 2.5 || !m2.Owns(3) {
		t.Errorf("loaded %+v, shard 2's first weight %v, owns shard 3: %v", got, m2.W[lo2], m2.Owns(3))
	}
}

// A damaged file or another model's is refused with a message that says
// which and why.
func TestCheckpointRefusesDamagedOrForeign(t *testing.T) {
	dir := t.TempDir()
	m := newModel(t, 500)
	m.Own(1)
	info := CheckpointInfo{Round: 3, Model: modelDesc(m)}
	if err := writeCheckpoint(dir, info, map[int][]byte{1: m.AppendShard(nil, 1, true)}, 0, nil); err != nil {
		t.Fatal(err)
	}
	path := ckptPath(dir, 3)
	if _, err := LoadCheckpoint(path, newModel(t, 900)); !errors.Is(err, ErrCheckpoint) || !contains(err, "this run trains") {
		t.Errorf("another model's checkpoint: %v", err)
	}
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 1
	os.WriteFile(path, b, 0o644)
	if _, err := LoadCheckpoint(path, newModel(t, 500)); !errors.Is(err, ErrCheckpoint) || !contains(err, "checksum") || !contains(err, path) {
		t.Errorf("a damaged checkpoint: %v", err)
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// fullDisk fails with ENOSPC once left bytes are written.
type fullDisk struct {
	w    io.Writer
	left int
}

func (f *fullDisk) Write(p []byte) (int, error) {
	if len(p) > f.left {
		n, _ := f.w.Write(p[:f.left])
		f.left = 0
		return n, &os.PathError{Op: "write", Path: "checkpoint", Err: syscall.ENOSPC}
	}
	f.left -= len(p)
	return f.w.Write(p)
}

// slowSource is a rowsSource that takes d to read a batch.
type slowSource struct {
	rowsSource
	d time.Duration
}

func (s *slowSource) Next(b *data.Batch, max int) (int, error) {
	time.Sleep(s.d)
	return s.rowsSource.Next(b, max)
}

// In ssp and async the checkpoint is a cut: every worker pauses, its
// pushes answered, and owners export once every worker's cut is in. A run
// resumed from it trains exactly the examples after each worker's cut
// (none twice, none lost) and ends as good as an uninterrupted run.
func TestCheckpointResumeSSPAndAsync(t *testing.T) {
	for _, mode := range []train.Mode{train.SSP, train.Async} {
		t.Run(mode.String(), func(t *testing.T) {
			setMode := func(cfg *Config) {
				cfg.Core.Mode = mode
				if mode == train.SSP {
					cfg.Core.Staleness = 2
				}
			}
			ref, errs := ckptRun(t, func(_ int, cfg *Config) { setMode(cfg) }, nil)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("uninterrupted run, peer %d: %v", i, err)
				}
			}
			dirs := make([]string, 3)
			for i := range dirs {
				dirs[i] = t.TempDir()
			}
			sums, errs := ckptRun(t, func(i int, cfg *Config) {
				setMode(cfg)
				cfg.CheckpointDir, cfg.CheckpointKeep = dirs[i], 1000
				cfg.Core.CheckpointTicks = 20
			}, nil)
			common := map[uint64]int{}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("run with checkpoints, peer %d: %v", i, err)
				}
				if sums[i].Checkpoints == 0 {
					t.Fatalf("peer %d wrote no checkpoint", i)
				}
				l, _ := ListCheckpoints(dirs[i])
				for _, c := range l {
					common[c.Round]++
				}
			}
			var r uint64
			for round, k := range common {
				if k == 3 && (r == 0 || absDiff(round, 50) < absDiff(r, 50)) {
					r = round
				}
			}
			if r == 0 {
				t.Fatalf("no checkpoint round common to the 3 peers: %v", common)
			}
			var before [3]int64
			var shards []int
			resumed, errs := ckptRun(t, func(i int, cfg *Config) {
				setMode(cfg)
				info, err := LoadCheckpoint(ckptPath(dirs[i], r), cfg.Core.Model)
				if err != nil {
					t.Fatal(err)
				}
				if !info.Worker {
					t.Fatalf("peer %d: checkpoint of round %d has no data position", i, r)
				}
				before[i] = info.Position.Examples
				shards = append(shards, info.Shards...)
				cfg.Core.Start, cfg.Resume = r, &info
			}, nil)
			slices.Sort(shards)
			if len(shards) != 16 || slices.Compact(shards)[15] != 15 {
				t.Errorf("the checkpoint files of round %d hold shards %v, want each of the 16 once", r, shards)
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("resumed run, peer %d: %v", i, err)
				}
				s := resumed[i]
				if s.Examples+before[i] != 2000 {
					t.Errorf("peer %d: %d examples before the cut + %d after = %d, want its 2000", i, before[i], s.Examples, s.Examples+before[i])
				}
				if s.ModelHash != resumed[0].ModelHash {
					t.Errorf("peer %d ends with model %x, peer 0 with %x", i, s.ModelHash, resumed[0].ModelHash)
				}
				if got, want := s.Final.LogLoss, ref[0].Final.LogLoss; got > want*1.02 {
					t.Errorf("peer %d: resumed at %d, test log-loss %.4f; uninterrupted %.4f", i, r, got, want)
				}
			}
			t.Logf("%v: resumed at %d (examples before the cut %v): log-loss %.4f, uninterrupted %.4f", mode, r, before, resumed[0].Final.LogLoss, ref[0].Final.LogLoss)
		})
	}
}

// damageFile cuts the file at path in half or flips one byte in its
// middle.
func damageFile(t *testing.T, path, how string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch how {
	case "cut in half":
		b = b[:len(b)/2]
	case "a byte flipped":
		b[len(b)/2] ^= 0x10
	default:
		t.Fatalf("damage %q?", how)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeRounds writes a worker's checkpoint of each round to dir, keeping
// them all.
func writeRounds(t *testing.T, dir, job string, rounds ...uint64) {
	t.Helper()
	m := newModel(t, 500)
	shards := map[int][]byte{}
	for sh := range 3 {
		m.Own(sh)
		shards[sh] = m.AppendShard(nil, sh, true)
	}
	for _, r := range rounds {
		info := CheckpointInfo{Job: job, Peer: "p", Round: r, Members: []string{"p"}, Worker: true, Model: modelDesc(m)}
		if err := writeCheckpoint(dir, info, shards, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// A checkpoint cut short or with a byte flipped is not listed (its body is
// read and checked, not only its header), ScanResume says which file and
// what is wrong, the warning names it once, and the line logged when the
// run resumes from the round before says so. Another job's file is passed
// over with its reason; a file whose name says another round than its
// header is not trusted.
func TestScanSkipsDamagedCheckpoints(t *testing.T) {
	for _, tc := range []struct{ damage, why string }{
		{"cut in half", "truncated"},
		{"a byte flipped", "checksum mismatch"},
	} {
		t.Run(tc.damage, func(t *testing.T) {
			dir := t.TempDir()
			writeRounds(t, dir, "job", 40, 80)
			damageFile(t, ckptPath(dir, 80), tc.damage)
			list, err := ListCheckpoints(dir)
			if err != nil || len(list) != 1 || list[0].Round != 40 {
				t.Fatalf("ListCheckpoints = %+v, %v: want round 40 only", list, err)
			}
			whole, damaged, err := ScanCheckpoints(dir)
			if err != nil || len(whole) != 1 || len(damaged) != 1 || damaged[0].Round != 80 ||
				!errors.Is(damaged[0].Err, ErrCheckpoint) || !contains(damaged[0].Err, tc.why) || !contains(damaged[0].Err, "round-80.ckpt") {
				t.Fatalf("ScanCheckpoints = %+v, %+v, %v: want round 80 damaged (%s)", whole, damaged, err, tc.why)
			}
			sc, err := ScanResume(dir, "job", newModel(t, 500))
			if err != nil || len(sc.Points) != 1 || sc.Points[0].Round != 40 || len(sc.Skipped) != 1 || !sc.Skipped[0].Damaged {
				t.Fatalf("ScanResume = %+v, %v: want round 40 resumable, round 80 skipped as damaged", sc, err)
			}
			var logs bytes.Buffer
			log := zerolog.New(&logs)
			sc.LogSkipped(log)
			sc.LogResuming(log, 40)
			out := logs.String()
			if n := strings.Count(out, `"file":"`+ckptPath(dir, 80)+`"`); n != 2 || !strings.Contains(out, `"level":"warn"`) {
				t.Errorf("want one warning naming the file at the scan and one at the resume, got:\n%s", out)
			}
			if want := "checkpoint round-80.ckpt is damaged (" + sc.Skipped[0].Why + "): resuming from round 40"; !strings.Contains(out, want) {
				t.Errorf("the log lacks %q:\n%s", want, out)
			}
		})
	}
	t.Run("another job, a renamed file, an empty dir", func(t *testing.T) {
		dir := t.TempDir()
		writeRounds(t, dir, "other-job", 40)
		writeRounds(t, dir, "job", 50)
		if err := os.Rename(ckptPath(dir, 50), ckptPath(dir, 90)); err != nil {
			t.Fatal(err)
		}
		sc, err := ScanResume(dir, "job", newModel(t, 500))
		if err != nil || len(sc.Points) != 0 || len(sc.Skipped) != 2 {
			t.Fatalf("ScanResume = %+v, %v: want nothing resumable and 2 files skipped", sc, err)
		}
		if s := sc.Skipped[0]; s.Round != 40 || s.Damaged || !strings.Contains(s.Why, `job "other-job"`) {
			t.Errorf("another job's file skipped as %+v", s)
		}
		if s := sc.Skipped[1]; s.Round != 90 || !s.Damaged || !strings.Contains(s.Why, "holds round 50, its name says 90") {
			t.Errorf("a renamed file skipped as %+v", s)
		}
		if d := sc.Describe(); !strings.Contains(d, dir) || !strings.Contains(d, "none this run can resume from") || !strings.Contains(d, "round-90.ckpt: ") {
			t.Errorf("Describe() = %q", d)
		}
		empty := t.TempDir()
		sc, err = ScanResume(filepath.Join(empty, "missing"), "job", newModel(t, 500))
		if err != nil || len(sc.Points)+len(sc.Skipped) != 0 || !strings.Contains(sc.Describe(), "holds no checkpoint") {
			t.Errorf("a missing dir: %+v, %v, %q", sc, err, sc.Describe())
		}
	})
}

// Old checkpoints are removed by the round in their names, so a file
// whose header is damaged is pruned too instead of staying for ever.
func TestCheckpointPruneRemovesDamagedOldFiles(t *testing.T) {
	dir := t.TempDir()
	writeRounds(t, dir, "job", 10)
	os.WriteFile(ckptPath(dir, 10), []byte("not a checkpoint"), 0o644)
	m := newModel(t, 500)
	m.Own(0)
	shards := map[int][]byte{0: m.AppendShard(nil, 0, true)}
	for _, r := range []uint64{20, 30} {
		if err := writeCheckpoint(dir, CheckpointInfo{Job: "job", Round: r, Model: modelDesc(m)}, shards, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"round-20.ckpt", "round-30.ckpt"}) {
		t.Errorf("after writing rounds 20 and 30 with keep 2 the dir holds %v", names)
	}
}
