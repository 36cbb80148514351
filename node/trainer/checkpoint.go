package trainer

// Checkpoint files of a peer of a cluster (sync mode).
//
// The core decides when (a configuration with Checkpoint set: every peer
// writes its part of round R); the trainer writes this peer's part as one
// file, DIR/round-<R>.ckpt:
//
//	"gossiptrain checkpoint 1\n"
//	uvarint length, then the JSON header (CheckpointInfo)
//	per shard of the header, in its order: uvarint length, then the
//	shard's export (model.Model.AppendShard, with optimizer state; it
//	carries its own checksum)
//	xxhash64 of everything before it, little endian
//
// A file is written to a temporary name, synced, renamed into place and
// its directory synced, so a crash or a full disk leaves the checkpoints
// already there intact and never a file that looks complete but is not.
// The newest Keep files stay; older ones are removed once a newer one is
// in place.
//
// A file can still be damaged later (a disk error, a copy cut short, an
// edit by hand): VerifyCheckpoint reads one whole and checks its layout and
// checksum, and ListCheckpoints and ScanResume list only files that pass,
// so --resume goes on from an older whole checkpoint instead of failing to
// load the newest (TestScanSkipsDamagedCheckpoints).

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
)

const (
	ckptMagic  = "gossiptrain checkpoint 1\n"
	ckptPrefix = "round-"
	ckptSuffix = ".ckpt"
	// maxCkptHeader bounds the JSON header (a thousand members' IDs fit).
	maxCkptHeader = 1 << 20
)

// ErrCheckpoint wraps the errors of reading a checkpoint file.
var ErrCheckpoint = errors.New("checkpoint")

// Position is where a worker is in its data: the batch of a round starts
// after Rows rows of epoch Epoch (0-based). Examples is what it trained
// before that batch since its run started from round 0.
type Position struct {
	Epoch    int   `json:"epoch"`
	Rows     int64 `json:"rows"`
	Examples int64 `json:"examples"`
}

// CheckpointInfo is a checkpoint file's header.
type CheckpointInfo struct {
	Job     string   `json:"job"`
	Peer    string   `json:"peer"`
	Round   uint64   `json:"round"`  // the first round after it: the model is as of the end of Round-1
	Config  uint64   `json:"config"` // the configuration that scheduled it
	Members []string `json:"members"`
	Shards  []int    `json:"shards"` // the shards in the file
	// Worker: this peer was a worker of Round; Position is its data
	// position before its batch of Round.
	Worker   bool     `json:"worker"`
	Position Position `json:"position"`
	Model    string   `json:"model"` // the model's kind and layout, to refuse another model's files
	Time     string   `json:"time"`  // RFC 3339, when it was written

	Path string `json:"-"`
}

// modelDesc describes a model's kind, layout and optimizer, as a
// checkpoint's header records them.
func modelDesc(m *model.Model) string {
	return fmt.Sprintf("%v %d features x %d in %d shards, %v", m.Kind, m.Layout.Features, m.Layout.Width, m.Layout.Shards, m.Opt.Kind)
}

// ckptPath is the file of round r in dir.
func ckptPath(dir string, r uint64) string {
	return filepath.Join(dir, ckptPrefix+strconv.FormatUint(r, 10)+ckptSuffix)
}

// writeCheckpoint writes a checkpoint file (atomically: see the package
// comment) and then removes all but the newest keep checkpoints of dir.
// wrap, when set, wraps the file's writer (tests simulate a full disk).
func writeCheckpoint(dir string, info CheckpointInfo, shards map[int][]byte, keep int, wrap func(io.Writer) io.Writer) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	info.Shards = info.Shards[:0]
	for s := range shards {
		info.Shards = append(info.Shards, s)
	}
	slices.Sort(info.Shards)
	hdr, err := json.Marshal(info)
	if err != nil {
		return err
	}
	path := ckptPath(dir, info.Round)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := xxhash.New()
	var fw io.Writer = f
	if wrap != nil {
		fw = wrap(f)
	}
	w := bufio.NewWriterSize(io.MultiWriter(fw, h), 1<<20)
	var nb [binary.MaxVarintLen64]byte
	put := func(b []byte) error {
		if _, err := w.Write(binary.AppendUvarint(nb[:0], uint64(len(b)))); err != nil {
			return err
		}
		_, err := w.Write(b)
		return err
	}
	if _, err = w.WriteString(ckptMagic); err != nil {
		return err
	}
	if err = put(hdr); err != nil {
		return err
	}
	for _, s := range info.Shards {
		if err = put(shards[s]); err != nil {
			return err
		}
	}
	if err = w.Flush(); err != nil {
		return err
	}
	if _, err = fw.Write(binary.LittleEndian.AppendUint64(nil, h.Sum64())); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	if keep > 0 {
		// By the rounds in the file names: reading the files would cost
		// a read of every kept checkpoint per write, and a file whose
		// header is damaged must go too.
		files, _ := checkpointFiles(dir)
		for i := 0; i+keep < len(files); i++ {
			os.Remove(files[i].path)
		}
	}
	return nil
}

// ckptFile is a file named like a checkpoint, and the round in its name.
type ckptFile struct {
	path  string
	round uint64
}

// checkpointFiles lists dir's files named round-<R>.ckpt, oldest round
// first; a missing dir has none.
func checkpointFiles(dir string) ([]ckptFile, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ckptFile
	for _, e := range ents {
		if r, ok := roundOfName(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, ckptFile{filepath.Join(dir, e.Name()), r})
		}
	}
	slices.SortFunc(out, func(a, b ckptFile) int { return cmpU64(a.round, b.round) })
	return out, nil
}

// roundOfName is R of a file named round-<R>.ckpt.
func roundOfName(name string) (uint64, bool) {
	if !strings.HasPrefix(name, ckptPrefix) || !strings.HasSuffix(name, ckptSuffix) {
		return 0, false
	}
	r, err := strconv.ParseUint(name[len(ckptPrefix):len(name)-len(ckptSuffix)], 10, 64)
	return r, err == nil
}

// ListCheckpoints returns the headers of the checkpoint files in dir
// that are whole (VerifyCheckpoint), oldest round first; a missing dir has
// none. ScanCheckpoints also says which files are damaged, and how.
func ListCheckpoints(dir string) ([]CheckpointInfo, error) {
	list, _, err := ScanCheckpoints(dir)
	return list, err
}

// DamagedCheckpoint is a checkpoint file that cannot be resumed from:
// Round is the round its name says, Err what is wrong with it.
type DamagedCheckpoint struct {
	Path  string
	Round uint64
	Err   error
}

// ScanCheckpoints reads every checkpoint file of dir whole
// (VerifyCheckpoint): it returns the headers of those that pass and the
// others with what is wrong, each oldest round first. A missing dir has
// none; an error is only one of reading the directory itself.
func ScanCheckpoints(dir string) (whole []CheckpointInfo, damaged []DamagedCheckpoint, err error) {
	files, err := checkpointFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range files {
		info, err := VerifyCheckpoint(f.path)
		if err != nil {
			damaged = append(damaged, DamagedCheckpoint{Path: f.path, Round: f.round, Err: err})
			continue
		}
		whole = append(whole, info)
	}
	return whole, damaged, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func readHeader(r *bufio.Reader) (CheckpointInfo, error) {
	var info CheckpointInfo
	magic := make([]byte, len(ckptMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != ckptMagic {
		return info, fmt.Errorf("%w: not a gossiptrain checkpoint", ErrCheckpoint)
	}
	n, err := binary.ReadUvarint(r)
	if err != nil || n > maxCkptHeader {
		return info, fmt.Errorf("%w: bad header length", ErrCheckpoint)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return info, fmt.Errorf("%w: truncated header", ErrCheckpoint)
	}
	if err := json.Unmarshal(hdr, &info); err != nil {
		return info, fmt.Errorf("%w: header: %v", ErrCheckpoint, err)
	}
	return info, nil
}

// VerifyCheckpoint reads the checkpoint file at path whole and checks
// it without a model: its header, every shard's length, that nothing
// follows the last shard, that the round in its header is the one in its
// name, and its checksum. It returns the header. The file is streamed, not
// held in memory. The shards' contents are checked against a model only by
// LoadCheckpoint. Errors wrap ErrCheckpoint and name the file and what is
// wrong ("truncated ...", "checksum mismatch ...").
func VerifyCheckpoint(path string) (CheckpointInfo, error) {
	bad := func(format string, a ...any) (CheckpointInfo, error) {
		return CheckpointInfo{}, fmt.Errorf("%w: %s: %s", ErrCheckpoint, path, fmt.Sprintf(format, a...))
	}
	f, err := os.Open(path)
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	size := st.Size()
	if size < int64(len(ckptMagic))+8 {
		return bad("truncated: %d bytes, less than any checkpoint", size)
	}
	body := size - 8
	h := xxhash.New()
	r := bufio.NewReaderSize(io.TeeReader(io.LimitReader(f, body), h), 1<<20)
	info, err := readHeader(r)
	if err != nil {
		return bad("%v", unwrapCkpt(err))
	}
	info.Path = path
	for i, s := range info.Shards {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return bad("truncated: the file ends before shard %d (%d of %d in the header)", s, i+1, len(info.Shards))
		}
		if n > uint64(body) {
			return bad("shard %d: length %d, more than the file's %d bytes", s, n, size)
		}
		if got, _ := r.Discard(int(n)); uint64(got) < n {
			return bad("truncated: the file ends inside shard %d (%d of %d in the header), %d bytes short", s, i+1, len(info.Shards), n-uint64(got))
		}
	}
	if extra, _ := io.Copy(io.Discard, r); extra > 0 {
		return bad("%d bytes after its last shard (damaged, or not written by gossiptrain)", extra)
	}
	var sum [8]byte
	if _, err := io.ReadFull(f, sum[:]); err != nil {
		return bad("reading its checksum: %v", err)
	}
	if h.Sum64() != binary.LittleEndian.Uint64(sum[:]) {
		return bad("checksum mismatch (the file is damaged)")
	}
	if r, ok := roundOfName(filepath.Base(path)); ok && r != info.Round {
		return bad("it holds round %d, its name says %d (renamed by hand?)", info.Round, r)
	}
	return info, nil
}

// unwrapCkpt drops readHeader's ErrCheckpoint prefix, for messages that
// add their own.
func unwrapCkpt(err error) string {
	return strings.TrimPrefix(err.Error(), ErrCheckpoint.Error()+": ")
}

// LoadCheckpoint reads the checkpoint file at path into m: every shard it
// holds, with its optimizer state (so those shards become owned). It
// checks the whole file's checksum and the model's description first; an
// error after that (a shard of another layout) may leave some shards
// loaded, and the run must not go on from m.
func LoadCheckpoint(path string, m *model.Model) (CheckpointInfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return CheckpointInfo{}, err
	}
	bad := func(format string, a ...any) (CheckpointInfo, error) {
		return CheckpointInfo{}, fmt.Errorf("%w: %s: %s", ErrCheckpoint, path, fmt.Sprintf(format, a...))
	}
	if len(b) < len(ckptMagic)+8 {
		return bad("truncated")
	}
	body := b[:len(b)-8]
	if xxhash.Sum64(body) != binary.LittleEndian.Uint64(b[len(body):]) {
		return bad("checksum mismatch (the file is damaged)")
	}
	r := bufio.NewReader(strings.NewReader(string(body)))
	info, err := readHeader(r)
	if err != nil {
		return bad("%v", unwrapCkpt(err))
	}
	info.Path = path
	if want := modelDesc(m); info.Model != want {
		return bad("it holds a model of %s, this run trains %s", info.Model, want)
	}
	exports := make([][]byte, len(info.Shards))
	for i, s := range info.Shards {
		n, err := binary.ReadUvarint(r)
		if err != nil || n > uint64(len(body)) {
			return bad("shard %d: bad length", s)
		}
		exports[i] = make([]byte, n)
		if _, err := io.ReadFull(r, exports[i]); err != nil {
			return bad("shard %d: truncated", s)
		}
		if s < 0 || s >= m.Layout.Shards {
			return bad("shard %d of a model of %d shards", s, m.Layout.Shards)
		}
	}
	for i, s := range info.Shards {
		if err := m.LoadShard(s, exports[i]); err != nil {
			return bad("shard %d: %v", s, err)
		}
	}
	return info, nil
}

// ckptJob is a checkpoint for the writer goroutine; ckptResult its outcome.
type ckptJob struct {
	info   CheckpointInfo
	shards map[int][]byte
}

type ckptResult struct {
	round uint64
	took  time.Duration
	err   error
}

// checkpoint hands the core's checkpoint request to the writer, with this
// worker's data position. It never blocks training: when the writer is
// still busy with the previous one, this one is skipped (and counted).
func (r *run) checkpoint(c train.CheckpointReq) {
	t := r.t
	if t.cfg.CheckpointDir == "" {
		return
	}
	info := CheckpointInfo{
		Job: t.cfg.Job, Peer: t.cfg.Core.Self, Round: c.Round, Config: c.Config,
		Members: c.Members, Model: modelDesc(t.m), Time: t.now().UTC().Format(time.RFC3339),
	}
	if c.Worker {
		i := c.WorkerRound - r.core.FirstRound()
		switch p, ok := r.pos[i]; {
		case ok:
			info.Worker, info.Position = true, p
		case i == r.given:
			info.Worker, info.Position = true, r.nextPos
		default:
			t.log.Warn().Uint64("round", c.Round).Msg("checkpoint: this worker's data position at its round is not known (its batch was not read yet): the file holds shards only, and cannot resume this worker")
		}
	}
	select {
	case r.ckpts <- ckptJob{info, c.Shards}:
	default:
		r.ckptFail++
		t.log.Warn().Uint64("round", c.Round).Msg("checkpoint skipped: the one before is still being written (checkpoints come faster than the disk takes them: raise --checkpoint-every)")
	}
}

// writeCheckpoints writes the checkpoints handed to it, one at a time.
func (r *run) writeCheckpoints(ctx context.Context) {
	t := r.t
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-r.ckpts:
			start := time.Now()
			err := writeCheckpoint(t.cfg.CheckpointDir, j.info, j.shards, t.cfg.CheckpointKeep, nil)
			select {
			case r.ckptRes <- ckptResult{j.info.Round, time.Since(start), err}:
			case <-ctx.Done():
				return
			}
		}
	}
}

func (r *run) checkpointWritten(res ckptResult) {
	t := r.t
	if res.err != nil {
		r.ckptFail++
		t.log.Error().Err(res.err).Uint64("round", res.round).Str("dir", t.cfg.CheckpointDir).
			Msg("checkpoint failed; the previous ones are kept and training goes on")
		return
	}
	r.ckptOK++
	r.ckptLast = res.round
	t.log.Info().Uint64("round", res.round).Str("file", ckptPath(t.cfg.CheckpointDir, res.round)).
		Dur("took", res.took).Msg("checkpoint written")
}
