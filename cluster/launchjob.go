package cluster

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/usage"
)

// LaunchConfig is a run of "gossiptrain launch": one peer on each of
// SSH.Hosts, over the user's ssh and scp.
type LaunchConfig struct {
	// SSH is the launcher, checked (SSH.Validate); RunLaunch sets its
	// Files with ShipData.
	SSH *SSH
	// Dir is the local run directory (created), Job the peers' job name,
	// SwarmKey their key file ("": a new key), Save where the first
	// host's model is copied back to ("": nowhere).
	Dir, Job, SwarmKey, Save string
	// ShipData copies each host's data to it; without --train the
	// generated set is always shipped.
	ShipData bool
	LogLevel string
	Train    TrainFlags
	Log      zerolog.Logger
	// Out gets the result table; Cmdline is the command line report.md
	// names.
	Out     io.Writer
	Cmdline string
}

// launchData is what the peers of a launch train on.
type launchData struct {
	common []string           // every peer's train flags
	own    func(int) []string // peer i's own
	split  dataSplit
	meta   *data.GenMeta
}

// RunLaunch runs a launch: the flags' mistakes first (they need no host),
// then the hosts (one that cannot be used fails the start before any data
// is generated, scanned or copied), the data, the peers, the model copied
// back, and the result table.
func RunLaunch(ctx context.Context, cfg LaunchConfig) error {
	log, ssh := cfg.Log, cfg.SSH
	n := len(ssh.Hosts)
	patterns := trainPatterns(cfg.Train)
	localData := len(patterns) > 0 && (cfg.ShipData || localFilesExist(patterns))
	if err := cfg.checkData(patterns, localData); err != nil {
		return err
	}
	log.Info().Int("hosts", n).Msg("checking the hosts")
	if err := ssh.Check(ctx); err != nil {
		return err
	}
	d, err := cfg.data(patterns, localData)
	if err != nil {
		return err
	}
	rc := DefaultConfig()
	rc.Peers, rc.Dir, rc.Job, rc.Log, rc.Launcher = n, cfg.Dir, cfg.Job, log, ssh
	rc.SwarmKey = cfg.SwarmKey
	rc.TrainArgs = append(d.common, "--log-level", cfg.LogLevel)
	remoteModel := "runs/" + ssh.Run + "/model.gt"
	rc.PeerArgs = func(i int) []string {
		a := d.own(i)
		if i == 0 && cfg.Save != "" {
			a = append(a, "--save", remoteModel)
		}
		return append(a, perPeer(cfg.Train, i)...)
	}
	rc.ProgressEvery = progressEvery(cfg.Train)
	rc.StartTimeout = 0

	log.Info().Int("hosts", n).Str("dir", cfg.Dir).Str("job", cfg.Job).Str("split", d.split.how).Bool("ship_data", cfg.ShipData).Msg("launching")
	res, err := Run(ctx, rc)
	if err != nil {
		return err
	}
	if cfg.Save != "" {
		if err := ssh.Fetch(ctx, 0, remoteModel, cfg.Save); err != nil {
			return fmt.Errorf("--save: %w", err)
		}
		log.Info().Str("file", cfg.Save).Str("from", ssh.Hosts[0].String()).Msg("model copied back")
	}
	return finish(cfg.Out, res, nil, d.meta, cfg.Cmdline, 0, log)
}

// checkData checks the data flags: local files exist; the hosts' own
// files need the model given in full.
func (cfg LaunchConfig) checkData(patterns []string, localData bool) error {
	switch {
	case localData:
		if _, _, err := infer.Expand(patterns, "train"); err != nil {
			return err
		}
		for _, f := range []string{"test", "train-labels", "test-labels"} {
			if v := cfg.Train.Value(f); v != "" {
				if _, _, err := infer.Expand([]string{v}, f); err != nil {
					return err
				}
			}
		}
	case len(patterns) > 0:
		return remoteModelFlags(cfg.Train)
	}
	return nil
}

// data generates, splits and ships the data, and resolves the model when
// the data is here to scan.
func (cfg *LaunchConfig) data(patterns []string, localData bool) (launchData, error) {
	log, tf, n := cfg.Log, cfg.Train, len(cfg.SSH.Hosts)
	var d launchData
	var err error
	pass := tf.Args(perPeerFlags...)
	switch {
	case len(patterns) == 0:
		gen := DefaultData()
		gen.Parts = n
		m, err := ensureData(filepath.Join(cfg.Dir, "data"), gen, log)
		if err != nil {
			return d, err
		}
		d.meta = &m
		if !cfg.ShipData {
			log.Info().Msg("shipping the generated data set to the hosts (as --ship-data)")
			cfg.ShipData = true
		}
		pass = append(append(pass, "--train="+strings.Join(m.Files, ",")), generatedFlags(tf, m)...)
		if !tf.Set("eval-every") {
			if ep, err := strconv.Atoi(tf.Value("epochs")); err == nil && ep > 0 {
				pass = append(pass, "--eval-every="+strconv.FormatInt(max(m.Rows*int64(ep)/int64(n)/4, 1), 10))
			}
		}
		if d.split, err = splitData(m.Files, n); err != nil {
			return d, err
		}
	case localData:
		if d.split, err = splitData(patterns, n); err != nil {
			return d, err
		}
		d.meta = d.split.meta
		pass = append(pass, "--train="+tf.Value("train"))
	default:
		// The hosts' own files: nothing to scan here.
		d.split = remoteSplit(patterns, n)
		pass = append(pass, "--train="+tf.Value("train"))
	}
	var resolved []string
	if localData || len(patterns) == 0 {
		if resolved, _, err = resolveModel(tf, pass, log); err != nil {
			return d, err
		}
	}
	d.common = append(append(withoutFlag(pass, "train"), d.split.common...), resolved...)
	d.own = d.split.own
	if cfg.ShipData {
		ship, err := shipFiles(pass, d.split, n)
		if err != nil {
			return d, err
		}
		d.common = ship.rewrite(d.common)
		split := d.split
		d.own = func(i int) []string { return ship.rewrite(split.own(i)) }
		cfg.SSH.Files = func(i int) []string { return ship.files[i] }
	}
	return d, nil
}

// LaunchJobName is a job name of its own for a launch: "launch-" and 6
// random hex digits, so that two launches (or a launch and a stranger's
// job on the same network) never take each other for peers of one job.
func LaunchJobName() string {
	b := make([]byte, 3)
	rand.Read(b) // never fails (crypto/rand)
	return "launch-" + hex.EncodeToString(b)
}

// ReadHostsFile reads one host a line; '#' starts a comment.
func ReadHostsFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		s, _, _ := strings.Cut(sc.Text(), "#")
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if strings.ContainsAny(s, " \t") {
			return nil, fmt.Errorf("%s:%d: %q: one host a line", path, line, s)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// localFilesExist reports whether every pattern names files here.
func localFilesExist(patterns []string) bool {
	if len(patterns) == 0 {
		return false
	}
	_, _, err := infer.Expand(patterns, "train")
	return err == nil
}

// remoteModelFlags checks that the model is fully given when the data
// lives on the hosts only: each peer would otherwise infer its own model
// from its own part.
func remoteModelFlags(tf TrainFlags) error {
	if !tf.Set("dim") {
		return usage.Flag("dim", "required when --train names the hosts' files (they cannot be scanned here to infer it; or use --ship-data)")
	}
	kind := tf.Value("model")
	if kind == "" || kind == "auto" {
		return usage.Flag("model", "give logreg, softmax or mlp when --train names the hosts' files (or use --ship-data)")
	}
	if k, err := model.ParseKind(kind); err == nil && k.Multiclass() && !tf.Set("classes") {
		return usage.Flag("classes", "required for --model %s when --train names the hosts' files", kind)
	}
	return nil
}
