package train

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// rewrite regenerates the expected output blocks of testdata/*.txt from
// what the scripts print now; review the diff by hand before committing.
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt")

// TestScripts replays every testdata/*.txt: scripted interactions of a few
// cores on a network the script drives message by message. Each file but
// basic.txt (a plain run, for reference) replays a schedule that once
// broke the protocol, in a few steps: its header names the rule
// (docs/protocol.md), the commit that fixed it and what the script printed
// on the code before that commit. That was checked by running the script
// there: git worktree add DIR FIX^, copy this file and the script into
// DIR/node/train, go test -run TestScripts/NAME. Unlike a seed of the
// simulator, a script names its schedule whatever else the code sends.
//
// A script is a list of commands, one a line ('#' starts a comment). A
// command followed by a line "----" expects the output that follows, up to
// the next blank line; a command with no such block must print nothing.
// go test -run TestScripts -rewrite writes the blocks from what the
// commands print. Commands:
//
//	peers N [mode=sync|ssp|async] [voters=V] [replicas=R] [data=B]
//	        [keys=K] [examples=E] [gather=need|full] [staleness=S]
//	        [retry=T] [codec=on|off] [fetch=auto|off]
//	        [opt=sgd|adagrad] [local=H] [localstate=on|off]
//	    start p0..pN-1, which bootstrap one run together, all alive.
//	    Shard s's holders are members[s mod n], members[s+1 mod n], ...
//	    (R of them, sorted peer names); 64 rows in 4 shards (row k is in
//	    shard k mod 4), trained with opt (default sgd); local=H makes a
//	    batch a window of H local steps (Config.LocalSteps), whose
//	    optimizer state the workers keep with localstate=on
//	    (Config.LocalState). Each peer has B batches (then the end of its
//	    data) of K rows and E examples: batch i of peer j touches rows
//	    (7j + 5i + 11m) mod 64, m < K. Messages go through the wire
//	    codec unless codec=off. With fetch=auto (the default) a peer told
//	    its values are final fetches its shards' hashes and then says it
//	    has finished, as the trainer does.
//	join P [via=Q] [data=B]    start a new peer that asks Q (default the
//	                           first running peer) to be admitted
//	restart P [via=Q] [data=B] start crashed P again, a newer incarnation
//	crash P                    stop P: no ticks; what is sent to it is lost
//	alive [P,Q...] [to=R,S]    tell R,S (default every running peer) that
//	                           P,Q (default every running peer) are alive
//	leave P                    P asks to leave the run
//	batch P keys=1,5 [examples=E]  queue one batch for P
//	data P N                   queue P's next N batches (the rule of peers
//	                           data=) and the end of its data
//	end P                      P has no more data after its queued batches
//	compute P [mode=auto|hold|nan|empty]
//	    how P's gradients are computed: auto answers a compute request at
//	    once (gradient of row k: E*((1+k%3)/8 + w) for each value w of
//	    the row the request gives, so stale values show in the model),
//	    hold keeps it until "compute P", nan answers with NaNs, empty with
//	    no rows. Without mode: answer P's held request now.
//	tick [N]                   N times: tick every running core once, then
//	                           deliver until nothing deliverable is queued
//	step [N]                   tick every running core N times, deliver
//	                           nothing
//	run until=COND [max=N]     tick until COND holds (at most N ticks,
//	                           default 5000): leader (every running peer
//	                           knows the same leader), config=C (every
//	                           running peer applied configuration C or
//	                           later), final (every running peer is
//	                           finishing), done (no peer runs: each is done,
//	                           left, failed or crashed), round=R (every
//	                           running peer's worker is at round R or
//	                           later)
//	deliver [FILTER] [n=N]     deliver the queued messages that match (at
//	                           most N), in the order they were sent; what
//	                           they cause is queued behind. Fails if none
//	                           matches.
//	drop [FILTER] [n=N]        remove queued messages that match
//	dup [FILTER] [n=N]         queue a second copy of messages that match
//	hold FILTER                from now on tick and run do not deliver
//	                           messages that match (they stay queued; a
//	                           peer's messages to itself are never held)
//	release                    forget every hold
//	cut FILTER                 from now on messages that match are lost
//	                           (but a peer's messages to itself)
//	heal                       forget every cut
//	fetch-hashes P             P asks the owners for its shards' hashes
//	msgs [FILTER]              print the queued messages that match
//	state P                    print P's configuration, leader, round, the
//	                           shards it holds and how it ended
//	stats P                    print P's counters that are not zero
//	events P                   print P's events since the last "events P"
//	models                     print each shard's holders and the hash and
//	                           sum of their copies, and the hashes each
//	                           peer fetched (agree or differ)
//	done                       print how each peer ended
//	voters P                   print the raft voters P knows (peer/incarnation)
//	debug [P...]               log the peers' Debug text and the queue
//	                           (never compared: for writing scripts)
//
// A FILTER is any of from=P to=P op=OP (push, pull, reply, forward, ack,
// state, raft, join, join-reply, leave, finished, hash, cut, ready)
// raft=TYPE (a raft message's type: MsgApp, MsgTimeoutNow, ...) round=R
// shard=S flags=F,... (moved, final, ask, refused, done, ...: all of them).
//
// Output is stable: peers print in name order, no map order or pointers.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScriptFile(t, f) })
	}
}

// scriptCmd is one command of a script and the output expected of it.
type scriptCmd struct {
	pre      []string // comment and blank lines before it
	line     int
	text     string
	expected []string
	hasBlock bool
}

func parseScript(path string) ([]scriptCmd, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var cmds []scriptCmd
	var pre []string
	sc := bufio.NewScanner(f)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if s := strings.TrimSpace(l); s == "" || strings.HasPrefix(s, "#") {
			pre = append(pre, l)
			continue
		}
		c := scriptCmd{pre: pre, line: i + 1, text: l}
		pre = nil
		if i+1 < len(lines) && lines[i+1] == "----" {
			c.hasBlock = true
			i += 2
			for ; i < len(lines) && lines[i] != ""; i++ {
				c.expected = append(c.expected, lines[i])
			}
			if i < len(lines) {
				i-- // the blank line is the next command's
			}
		}
		cmds = append(cmds, c)
	}
	return cmds, pre, nil
}

func runScriptFile(t *testing.T, path string) {
	cmds, tail, err := parseScript(path)
	if err != nil {
		t.Fatal(err)
	}
	sn := &scNet{t: t, procs: map[string]*scProc{}}
	var out strings.Builder
	failed := false
	for i := range cmds {
		c := &cmds[i]
		text, _, _ := strings.Cut(c.text, "#")
		got, err := sn.command(strings.Fields(text))
		if err != nil {
			t.Fatalf("%s:%d: %s: %v\n%s", path, c.line, c.text, err, sn.describe())
		}
		got = strings.TrimRight(got, "\n")
		var gotLines []string
		if got != "" {
			gotLines = strings.Split(got, "\n")
		}
		if *rewrite {
			for _, p := range c.pre {
				out.WriteString(p + "\n")
			}
			out.WriteString(c.text + "\n")
			if len(gotLines) > 0 {
				out.WriteString("----\n" + got + "\n")
				if i+1 < len(cmds) && (len(cmds[i+1].pre) == 0 || cmds[i+1].pre[0] != "") {
					out.WriteString("\n")
				}
			}
			continue
		}
		if !slices.Equal(gotLines, c.expected) {
			failed = true
			t.Errorf("%s:%d: %s:\ngot:\n%s\nwant:\n%s", path, c.line, c.text, got, strings.Join(c.expected, "\n"))
		}
	}
	if *rewrite {
		for _, p := range tail {
			out.WriteString(p + "\n")
		}
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if failed {
		t.Logf("state at the end:\n%s", sn.describe())
	}
}

// The network and its peers.

type scBatch struct {
	keys     []uint32
	examples int
}

type scProc struct {
	name    string
	index   int
	inc     uint64
	id      uint64
	core    *Core
	up      bool
	crashed bool
	batches []scBatch
	ended   bool // no more data after batches
	compute string
	held    *ComputeReq
	fetchID uint64
	done    bool
	left    bool
	err     error
	events  []Event
	hashes  []uint64 // the shard hashes of the last FetchHashes answered
}

type scMsg struct {
	seq  int
	from string
	to   string
	msg  *wire.Core
}

type scFilter struct {
	from, to string
	op       string
	raft     string // the raft message type (op raft)
	round    int64
	shard    int64
	flags    string
}

type scNet struct {
	t        testing.TB
	procs    map[string]*scProc
	names    []string // every peer ever started, in name order
	mode     Mode
	stale    int
	gather   Gather
	voters   int
	replicas int
	keys     int
	examples int
	retry    int
	auto     bool // fetch hashes and finish when final
	codec    *wire.Codec
	queue    []scMsg
	seq      int
	holds    []scFilter
	cuts     []scFilter
	batchIdx map[string]int
	opt      model.OptKind
	local    int  // Config.LocalSteps
	locState bool // Config.LocalState
	// onSend and onCompute, when set, are told of every message queued
	// (not cut) and every compute request a core makes (for tests that
	// drive scNet from Go).
	onSend    func(scMsg)
	onCompute func(*scProc, *ComputeReq)
}

func (sn *scNet) command(f []string) (string, error) {
	if len(f) == 0 {
		return "", nil
	}
	cmd, args := f[0], f[1:]
	kv := map[string]string{}
	var pos []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	num := func(k string, def int) (int, error) {
		v, ok := kv[k]
		if !ok {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: not a number", k, v)
		}
		return n, nil
	}
	peer := func() (*scProc, error) {
		if len(pos) != 1 {
			return nil, fmt.Errorf("%s wants one peer, got %v", cmd, pos)
		}
		p := sn.procs[pos[0]]
		if p == nil {
			return nil, fmt.Errorf("no peer %s", pos[0])
		}
		return p, nil
	}
	if cmd != "peers" && len(sn.procs) == 0 {
		return "", fmt.Errorf("no peers: start with peers N")
	}
	switch cmd {
	case "peers":
		return "", sn.start(pos, kv)
	case "join", "restart":
		if len(pos) != 1 {
			return "", fmt.Errorf("%s wants one peer", cmd)
		}
		old := sn.procs[pos[0]]
		switch {
		case cmd == "join" && old != nil:
			return "", fmt.Errorf("peer %s exists; use restart", pos[0])
		case cmd == "restart" && old == nil:
			return "", fmt.Errorf("no peer %s; use join", pos[0])
		case cmd == "restart" && old.up:
			return "", fmt.Errorf("peer %s runs; crash it first", pos[0])
		}
		data, err := num("data", 0)
		if err != nil {
			return "", err
		}
		via := kv["via"]
		if via == "" {
			for _, n := range sn.names {
				if sn.procs[n].up && n != pos[0] {
					via = n
					break
				}
			}
		}
		return "", sn.newProc(pos[0], nil, via, data)
	case "crash":
		p, err := peer()
		if err != nil {
			return "", err
		}
		p.up, p.crashed = false, true
	case "alive":
		var ids []uint64
		who := sn.running()
		if len(pos) > 0 {
			who = nil
			for _, n := range strings.Split(pos[0], ",") {
				if sn.procs[n] == nil {
					return "", fmt.Errorf("no peer %s", n)
				}
				who = append(who, sn.procs[n])
			}
		}
		for _, p := range who {
			ids = append(ids, p.id)
		}
		slices.Sort(ids)
		to := sn.running()
		if v := kv["to"]; v != "" {
			to = nil
			for _, n := range strings.Split(v, ",") {
				if p := sn.procs[n]; p != nil && p.up {
					to = append(to, p)
				}
			}
		}
		for _, p := range to {
			p.core.Alive(slices.Clone(ids))
			sn.handle(p)
		}
	case "leave":
		p, err := peer()
		if err != nil {
			return "", err
		}
		p.core.Leave()
		sn.handle(p)
	case "batch":
		p, err := peer()
		if err != nil {
			return "", err
		}
		ex, err := num("examples", sn.examples)
		if err != nil {
			return "", err
		}
		var keys []uint32
		for _, k := range strings.Split(kv["keys"], ",") {
			n, err := strconv.ParseUint(k, 10, 32)
			if err != nil {
				return "", fmt.Errorf("keys=%q: %v", kv["keys"], err)
			}
			keys = append(keys, uint32(n))
		}
		slices.Sort(keys)
		p.batches = append(p.batches, scBatch{keys: slices.Compact(keys), examples: ex})
		sn.handle(p)
	case "data":
		if len(pos) != 2 {
			return "", fmt.Errorf("data wants a peer and a count")
		}
		p := sn.procs[pos[0]]
		n, err := strconv.Atoi(pos[1])
		if p == nil || err != nil {
			return "", fmt.Errorf("data %s %s: want a peer and a count", pos[0], pos[1])
		}
		sn.addData(p, n)
		sn.handle(p)
	case "end":
		p, err := peer()
		if err != nil {
			return "", err
		}
		p.ended = true
		sn.handle(p)
	case "compute":
		p, err := peer()
		if err != nil {
			return "", err
		}
		if m, ok := kv["mode"]; ok {
			if m != "auto" && m != "hold" && m != "nan" && m != "empty" {
				return "", fmt.Errorf("compute mode %q: auto, hold, nan or empty", m)
			}
			p.compute = m
			if m != "hold" && p.held != nil {
				sn.answer(p)
			}
			sn.handle(p)
			return "", nil
		}
		if p.held == nil {
			return "", fmt.Errorf("%s has no compute request held", p.name)
		}
		mode := p.compute
		p.compute = "auto"
		sn.answer(p)
		p.compute = mode
		sn.handle(p)
	case "tick", "step":
		n := 1
		if len(pos) > 0 {
			var err error
			if n, err = strconv.Atoi(pos[0]); err != nil {
				return "", fmt.Errorf("%s %q: not a number", cmd, pos[0])
			}
		}
		for range n {
			sn.tickAll(cmd == "tick")
		}
	case "run":
		limit, err := num("max", 5000)
		if err != nil {
			return "", err
		}
		cond, ok := sn.condition(kv["until"])
		if !ok {
			return "", fmt.Errorf("run until=%q: leader, config=C, final, done or round=R", kv["until"])
		}
		for i := 0; !cond(); i++ {
			if i == limit {
				return "", fmt.Errorf("not %s after %d ticks", kv["until"], limit)
			}
			sn.tickAll(true)
		}
	case "deliver", "drop", "dup", "msgs":
		flt, err := parseFilter(kv)
		if err != nil {
			return "", err
		}
		n, err := num("n", math.MaxInt)
		if err != nil {
			return "", err
		}
		var picked []scMsg
		rest := sn.queue[:0:0]
		for _, m := range sn.queue {
			if len(picked) < n && flt.match(m) {
				picked = append(picked, m)
				if cmd == "msgs" || cmd == "dup" {
					rest = append(rest, m)
				}
			} else {
				rest = append(rest, m)
			}
		}
		switch cmd {
		case "msgs":
			var b strings.Builder
			for _, m := range picked {
				b.WriteString(describeMsg(m) + "\n")
			}
			return b.String(), nil
		case "dup":
			sn.queue = rest
			for _, m := range picked {
				sn.seq++
				sn.queue = append(sn.queue, scMsg{seq: sn.seq, from: m.from, to: m.to, msg: m.msg.Clone()})
			}
		case "drop":
			sn.queue = rest
		case "deliver":
			sn.queue = rest
			for _, m := range picked {
				sn.deliverOne(m)
			}
		}
		if len(picked) == 0 && cmd != "msgs" {
			return "", fmt.Errorf("no queued message matches")
		}
	case "hold", "cut":
		flt, err := parseFilter(kv)
		if err != nil {
			return "", err
		}
		if cmd == "hold" {
			sn.holds = append(sn.holds, flt)
		} else {
			sn.cuts = append(sn.cuts, flt)
		}
	case "release":
		sn.holds = nil
	case "heal":
		sn.cuts = nil
	case "fetch-hashes":
		p, err := peer()
		if err != nil {
			return "", err
		}
		p.fetchID++
		p.core.FetchHashes(p.fetchID)
		sn.handle(p)
	case "state":
		p, err := peer()
		if err != nil {
			return "", err
		}
		return sn.state(p), nil
	case "stats":
		p, err := peer()
		if err != nil {
			return "", err
		}
		return statsLine(p.core.Stats()), nil
	case "events":
		p, err := peer()
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, e := range p.events {
			b.WriteString(describeEvent(e) + "\n")
		}
		p.events = nil
		return b.String(), nil
	case "models":
		return sn.models(), nil
	case "voters":
		p, err := peer()
		if err != nil {
			return "", err
		}
		var vs []string
		for _, id := range p.core.ag.voters {
			vs = append(vs, sn.memberName(id))
		}
		slices.Sort(vs)
		return "voters " + strings.Join(vs, ","), nil
	case "debug":
		// For writing a script: the test log gets Debug's text (not stable:
		// never compared).
		for _, n := range sn.names {
			if p := sn.procs[n]; p.up && (len(pos) == 0 || slices.Contains(pos, n)) {
				sn.t.Logf("%s", p.core.Debug())
			}
		}
		for _, m := range sn.queue {
			sn.t.Logf("queued %s req %d", describeMsg(m), m.msg.Req)
		}
	case "done":
		var b strings.Builder
		for _, n := range sn.names {
			b.WriteString(n + ": " + sn.ending(sn.procs[n]) + "\n")
		}
		return b.String(), nil
	default:
		return "", fmt.Errorf("unknown command %q", cmd)
	}
	return "", nil
}

func (sn *scNet) start(pos []string, kv map[string]string) error {
	if len(sn.procs) > 0 {
		return fmt.Errorf("peers already started")
	}
	if len(pos) != 1 {
		return fmt.Errorf("peers wants a count")
	}
	n, err := strconv.Atoi(pos[0])
	if err != nil || n < 1 {
		return fmt.Errorf("peers %q: not a count", pos[0])
	}
	ints := map[string]*int{"voters": &sn.voters, "replicas": &sn.replicas, "keys": &sn.keys, "examples": &sn.examples, "retry": &sn.retry, "staleness": &sn.stale, "local": &sn.local}
	sn.voters, sn.replicas, sn.keys, sn.examples, sn.retry, sn.stale = 5, 1, 3, 10, 20, 2
	sn.opt = model.SGD
	data := 0
	ints["data"] = &data
	sn.mode, sn.gather, sn.auto = Sync, Need, true
	sn.codec = wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
	sn.batchIdx = map[string]int{}
	for k, v := range kv {
		switch k {
		case "mode":
			if sn.mode, err = ParseMode(v); err != nil {
				return err
			}
		case "gather":
			switch v {
			case "need":
				sn.gather = Need
			case "full":
				sn.gather = Full
			default:
				return fmt.Errorf("gather=%q: need or full", v)
			}
		case "codec":
			if v == "off" {
				sn.codec = nil
			}
		case "fetch":
			sn.auto = v != "off"
		case "opt":
			switch v {
			case "sgd":
				sn.opt = model.SGD
			case "adagrad":
				sn.opt = model.AdaGrad
			default:
				return fmt.Errorf("opt=%q: sgd or adagrad", v)
			}
		case "localstate":
			if v != "on" && v != "off" {
				return fmt.Errorf("localstate=%q: on or off", v)
			}
			sn.locState = v == "on"
		default:
			p := ints[k]
			if p == nil {
				return fmt.Errorf("peers: unknown setting %q", k)
			}
			if *p, err = strconv.Atoi(v); err != nil {
				return fmt.Errorf("%s=%q: not a number", k, v)
			}
		}
	}
	var initial []Member
	var names []string
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		names = append(names, name)
		initial = append(initial, Member{Peer: name, ID: MemberID(name, 1)})
	}
	for _, name := range names {
		if err := sn.newProc(name, initial, "", data); err != nil {
			return err
		}
	}
	var ids []uint64
	for _, m := range initial {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	for _, name := range names {
		p := sn.procs[name]
		p.core.Alive(slices.Clone(ids))
		sn.handle(p)
	}
	return nil
}

// scPlace gives shard s to members[s mod n] and the replicas-1 after it.
type scPlace struct {
	members  []string
	replicas int
}

func (p scPlace) Owners(s int) []string {
	var out []string
	for i := range min(p.replicas, len(p.members)) {
		out = append(out, p.members[(s+i)%len(p.members)])
	}
	return out
}

func (sn *scNet) newProc(name string, initial []Member, contact string, data int) error {
	inc := uint64(1)
	index := len(sn.names)
	if old := sn.procs[name]; old != nil {
		inc, index = old.inc+1, old.index
	} else {
		sn.names = append(sn.names, name)
		slices.Sort(sn.names)
	}
	p := &scProc{name: name, index: index, inc: inc, id: MemberID(name, inc), compute: "auto", up: true}
	if old := sn.procs[name]; old != nil {
		p.compute = old.compute
	}
	m, err := model.New(model.Logreg, 64, 2, 4, model.DefaultOptConfig(sn.opt))
	if err != nil {
		return err
	}
	cfg := DefaultConfig()
	cfg.Self, cfg.ID, cfg.Mode, cfg.Gather, cfg.Model = name, p.id, sn.mode, sn.gather, m
	cfg.LocalSteps, cfg.LocalState = sn.local, sn.locState
	if sn.mode == SSP {
		cfg.Staleness = sn.stale
	}
	replicas := sn.replicas
	cfg.Place = func(members []string) (Placement, error) { return scPlace{members, replicas}, nil }
	cfg.Initial, cfg.Contact = initial, contact
	cfg.Contacts = sn.contacts(name, contact, initial == nil)
	cfg.Voters, cfg.Seed = sn.voters, uint64(index+1)
	cfg.Raft.Every, cfg.RetryTicks = 1, sn.retry
	cfg.Limits.Features = m.Layout.Features
	c, err := New(cfg)
	if err != nil {
		return err
	}
	p.core = c
	sn.addData(p, data)
	sn.procs[name] = p
	sn.handle(p)
	return nil
}

// addData queues p's next n batches and the end of its data (none with n
// 0): batch i touches rows (7j + 5i + 11m) mod 64, m < keys, for peer j.
func (sn *scNet) addData(p *scProc, n int) {
	for range n {
		i := sn.batchIdx[p.name]
		sn.batchIdx[p.name]++
		var keys []uint32
		for m := range sn.keys {
			keys = append(keys, uint32((7*p.index+5*i+11*m)%64))
		}
		slices.Sort(keys)
		p.batches = append(p.batches, scBatch{keys: slices.Compact(keys), examples: sn.examples})
	}
	p.ended = p.ended || n > 0
}

// contacts are the other running peers a joiner may ask when its contact
// is silent, as the trainer's start probes find them.
func (sn *scNet) contacts(name, contact string, joining bool) []string {
	var out []string
	for _, n := range sn.names {
		if q := sn.procs[n]; joining && q != nil && q.up && n != contact && n != name {
			out = append(out, n)
		}
	}
	return out
}

func (sn *scNet) running() []*scProc {
	var out []*scProc
	for _, n := range sn.names {
		if p := sn.procs[n]; p.up {
			out = append(out, p)
		}
	}
	return out
}

// handle acts on everything p's core decided, as a driver would.
func (sn *scNet) handle(p *scProc) {
	for p.up {
		rd := p.core.Ready()
		busy := false
		for _, e := range rd.Messages {
			busy = true
			sn.send(p.name, e)
		}
		if rd.Compute != nil {
			busy = true
			if sn.onCompute != nil {
				sn.onCompute(p, rd.Compute)
			}
			p.held = rd.Compute
			if p.compute != "hold" {
				sn.answer(p)
			}
		}
		for range rd.WantBatches {
			if len(p.batches) > 0 {
				b := p.batches[0]
				p.batches = p.batches[1:]
				p.core.Batch(b.keys, b.examples)
				busy = true
			} else if p.ended {
				p.core.EndOfData()
				p.ended = false // said once
				busy = true
				break
			}
		}
		for _, e := range rd.Events {
			busy = true
			p.events = append(p.events, e)
			if e.Kind == EvFinal && sn.auto {
				p.fetchID++
				p.core.FetchHashes(p.fetchID)
			}
		}
		for _, f := range rd.Fetched {
			busy = true
			if f.Hashes != nil {
				p.hashes = slices.Clone(f.Hashes)
				if sn.auto && f.ID == p.fetchID {
					p.core.Finish()
				}
			}
		}
		if rd.Err != nil {
			p.err, p.up = rd.Err, false
			return
		}
		if rd.Done {
			p.done, p.left, p.up = true, rd.Left, false
			return
		}
		if !busy {
			return
		}
	}
}

// answer computes p's held request: the gradient of row k is
// E*((1+k%3)/8 + w) for each of its values w, E the request's examples.
func (sn *scNet) answer(p *scProc) {
	req := p.held
	p.held = nil
	if req == nil {
		return
	}
	switch p.compute {
	case "empty":
		p.core.Computed(req.Round, nil, 0)
		return
	}
	w := 0
	if len(req.Keys) > 0 {
		w = len(req.Weights) / len(req.Keys)
	}
	g := make([]float32, len(req.Keys)*w)
	for i, k := range req.Keys {
		for j := range w {
			g[i*w+j] = float32(req.Examples) * (float32(1+k%3)/8 + req.Weights[i*w+j])
			if p.compute == "nan" {
				g[i*w+j] = float32(math.NaN())
			}
		}
	}
	p.core.Computed(req.Round, g, 0.5)
}

func (sn *scNet) send(from string, e Envelope) {
	msg := e.Msg.Clone()
	if sn.codec != nil && e.To != from {
		b, err := sn.codec.AppendCore(nil, wire.Header{Job: "script", Sender: from}, msg)
		if err != nil {
			sn.t.Fatalf("%s encodes %s: %v", from, msg.Op, err)
		}
		var m wire.Message
		if err := sn.codec.Decode(b, &m); err != nil {
			sn.t.Fatalf("%s's %s does not decode: %v", from, msg.Op, err)
		}
		msg = m.Core.Clone()
	}
	sm := scMsg{from: from, to: e.To, msg: msg}
	if e.To != from {
		for _, f := range sn.cuts {
			if f.match(sm) {
				return
			}
		}
	}
	sn.seq++
	sm.seq = sn.seq
	if sn.onSend != nil {
		sn.onSend(sm)
	}
	sn.queue = append(sn.queue, sm)
}

func (sn *scNet) deliverOne(m scMsg) {
	p := sn.procs[m.to]
	if p == nil || !p.up {
		return
	}
	p.core.Receive(m.from, m.msg)
	sn.handle(p)
}

func (sn *scNet) held(m scMsg) bool {
	if m.from == m.to {
		return false // a peer's messages to itself take no network
	}
	for _, f := range sn.holds {
		if f.match(m) {
			return true
		}
	}
	return false
}

// tickAll ticks every running core once and, with deliver, delivers until
// nothing deliverable is queued.
func (sn *scNet) tickAll(deliver bool) {
	for _, p := range sn.running() {
		p.core.Tick()
		sn.handle(p)
	}
	if !deliver {
		return
	}
	for n := 0; n < 1<<16; n++ {
		i := slices.IndexFunc(sn.queue, func(m scMsg) bool { return !sn.held(m) })
		if i < 0 {
			return
		}
		m := sn.queue[i]
		sn.queue = slices.Delete(sn.queue, i, i+1)
		sn.deliverOne(m)
	}
	sn.t.Fatalf("more than %d messages delivered in one tick", 1<<16)
}

func (sn *scNet) condition(s string) (func() bool, bool) {
	all := func(f func(p *scProc) bool) func() bool {
		return func() bool {
			for _, p := range sn.running() {
				if !f(p) {
					return false
				}
			}
			return true
		}
	}
	k, v, _ := strings.Cut(s, "=")
	n, err := strconv.ParseUint(v, 10, 64)
	switch {
	case s == "leader":
		return func() bool {
			run := sn.running()
			if len(run) == 0 || run[0].core.Leader() == "" {
				return false
			}
			return all(func(p *scProc) bool { return p.core.Leader() == run[0].core.Leader() })()
		}, true
	case s == "final":
		return all(func(p *scProc) bool { return p.core.Finishing() }), true
	case s == "done":
		return func() bool { return len(sn.running()) == 0 }, true
	case k == "config" && err == nil:
		return all(func(p *scProc) bool { return p.core.ConfigID() >= n }), true
	case k == "round" && err == nil:
		return all(func(p *scProc) bool { return p.core.Round() >= n }), true
	}
	return nil, false
}

func parseFilter(kv map[string]string) (scFilter, error) {
	f := scFilter{from: kv["from"], to: kv["to"], op: kv["op"], raft: kv["raft"], flags: kv["flags"], round: -1, shard: -1}
	for k, p := range map[string]*int64{"round": &f.round, "shard": &f.shard} {
		if v, ok := kv[k]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return f, fmt.Errorf("%s=%q: not a number", k, v)
			}
			*p = n
		}
	}
	for k := range kv {
		switch k {
		case "from", "to", "op", "raft", "flags", "round", "shard", "n":
		default:
			return f, fmt.Errorf("unknown filter %q", k)
		}
	}
	return f, nil
}

func (f scFilter) match(m scMsg) bool {
	switch {
	case f.from != "" && f.from != m.from, f.to != "" && f.to != m.to,
		f.op != "" && f.op != m.msg.Op.String(),
		f.round >= 0 && uint64(f.round) != m.msg.Round,
		f.shard >= 0 && !slices.Contains(m.msg.Shards, uint32(f.shard)),
		f.raft != "" && raftType(m.msg) != f.raft:
		return false
	}
	if f.flags != "" {
		have := flagNames(m.msg.Flags)
		for _, fl := range strings.Split(f.flags, ",") {
			if !slices.Contains(have, fl) {
				return false
			}
		}
	}
	return true
}

// raftType is the type of the raft message m carries ("" if none).
func raftType(m *wire.Core) string {
	var rm raftpb.Message
	if m.Op != wire.CoreRaft || proto.Unmarshal(m.Blob, &rm) != nil {
		return ""
	}
	return rm.GetType().String()
}

func flagNames(fl wire.CoreFlags) []string {
	names := []string{"done", "final", "resend", "moved", "rows", "refused", "reply", "all", "ask", "fresh"}
	var out []string
	for i, n := range names {
		if fl&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

func describeMsg(m scMsg) string {
	c := m.msg
	s := fmt.Sprintf("%s->%s %s", m.from, m.to, c.Op)
	if c.Op == wire.CoreRaft {
		return s + " " + raftType(c)
	}
	if fl := flagNames(c.Flags); len(fl) > 0 {
		s += " flags=" + strings.Join(fl, ",")
	}
	s += fmt.Sprintf(" config=%d round=%d", c.Config, c.Round)
	if len(c.Shards) > 0 {
		s += fmt.Sprintf(" shards=%v", c.Shards)
	}
	if c.Examples > 0 {
		s += fmt.Sprintf(" examples=%d", c.Examples)
	}
	if n := c.Rows.Len(); n > 0 {
		s += fmt.Sprintf(" rows=%d", n)
	}
	if c.Text != "" {
		s += fmt.Sprintf(" text=%q", c.Text)
	}
	return s
}

func describeEvent(e Event) string {
	kinds := map[EventKind]string{
		EvConfig:    "config",
		EvPromoted:  "promoted",
		EvHandedOff: "handed-off",
		EvReceived:  "received",
		EvLeader:    "leader",
		EvFinal:     "final",
		EvLost:      "lost",
		EvDropped:   "dropped",
	}
	s := kinds[e.Kind]
	if s == "" {
		s = fmt.Sprintf("event-%d", e.Kind)
	}
	switch e.Kind {
	case EvConfig:
		s += fmt.Sprintf(" %d start=%d members=%s", e.Config, e.Start, strings.Join(e.Members, ","))
		for _, l := range []struct {
			k string
			v []string
		}{{"joined", e.Joined}, {"left", e.Left}, {"crashed", e.Crashed}} {
			if len(l.v) > 0 {
				s += " " + l.k + "=" + strings.Join(l.v, ",")
			}
		}
		if e.Final {
			s += " final"
		}
	case EvPromoted, EvHandedOff, EvReceived, EvLost:
		if e.Peer != "" {
			s += " peer=" + e.Peer
		}
		if e.Text != "" {
			s += ": " + e.Text
		}
	case EvDropped:
		s += fmt.Sprintf(" rows=%d peer=%s", e.Rows, e.Peer) // EvDropped
	}
	return s
}

func (sn *scNet) ending(p *scProc) string {
	switch {
	case p.err != nil:
		return "failed: " + p.err.Error()
	case p.left:
		return "left"
	case p.done:
		return "done"
	case p.crashed && !p.up:
		return "crashed"
	}
	return "running"
}

func (sn *scNet) state(p *scProc) string {
	c := p.core
	var held []string
	for s := range c.shards {
		if c.Holds(s) {
			held = append(held, strconv.Itoa(s))
		}
	}
	return fmt.Sprintf("%s: %s config=%d members=%s leader=%s round=%d finishing=%v holds=%s primaries=%s",
		p.name, sn.ending(p), c.ConfigID(), strings.Join(c.Members(), ","), c.Leader(), c.Round(), c.Finishing(),
		strings.Join(held, ","), strings.Join(c.Primaries(), ","))
}

// statsLine prints the counters that are not zero, in the struct's order.
func statsLine(s Stats) string {
	v := reflect.ValueOf(s)
	var parts []string
	for i := range v.NumField() {
		if n := v.Field(i).Uint(); n != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", strings.ToLower(v.Type().Field(i).Name), n))
		}
	}
	if len(parts) == 0 {
		return "(all zero)"
	}
	return strings.Join(parts, " ")
}

func (sn *scNet) models() string {
	var b strings.Builder
	shards := 4
	for s := range shards {
		fmt.Fprintf(&b, "shard %d:", s)
		var hs []uint64
		for _, n := range sn.names {
			p := sn.procs[n]
			if p.crashed || p.err != nil || !p.core.Holds(s) {
				continue
			}
			h := p.core.m.ShardHash(s)
			hs = append(hs, h)
			lo, hi := p.core.m.Layout.ShardRange(s)
			sum := 0.0
			for _, w := range p.core.m.W[lo:hi] {
				sum += float64(w)
			}
			fmt.Fprintf(&b, " %s=%04x(sum %.4f)", p.name, h&0xffff, sum)
		}
		switch {
		case len(hs) == 0:
			b.WriteString(" no holder running")
		case slices.Min(hs) != slices.Max(hs):
			b.WriteString(" DIFFER")
		}
		b.WriteString("\n")
	}
	var got [][]uint64
	for _, n := range sn.names {
		p := sn.procs[n]
		if p.hashes == nil {
			continue
		}
		var hx []string
		for _, h := range p.hashes {
			hx = append(hx, fmt.Sprintf("%04x", h&0xffff))
		}
		fmt.Fprintf(&b, "fetched by %s: %s\n", n, strings.Join(hx, " "))
		got = append(got, p.hashes)
	}
	if len(got) > 1 {
		agree := true
		for _, h := range got[1:] {
			agree = agree && slices.Equal(h, got[0])
		}
		if agree {
			b.WriteString("fetched hashes agree\n")
		} else {
			b.WriteString("fetched hashes DIFFER\n")
		}
	}
	return b.String()
}

// memberName names member id as peer/incarnation (or its hex).
func (sn *scNet) memberName(id uint64) string {
	for _, n := range sn.names {
		p := sn.procs[n]
		for inc := uint64(1); inc <= p.inc; inc++ {
			if MemberID(n, inc) == id {
				return fmt.Sprintf("%s/%d", n, inc)
			}
		}
	}
	return fmt.Sprintf("%x", id)
}

// describe is the state of every peer and the queue, for a failed script.
func (sn *scNet) describe() string {
	var b strings.Builder
	for _, n := range sn.names {
		p := sn.procs[n]
		b.WriteString(sn.state(p) + "\n")
		if p.up {
			b.WriteString(p.core.Debug())
		}
	}
	fmt.Fprintf(&b, "%d messages queued\n", len(sn.queue))
	for i, m := range sn.queue {
		if i == 20 {
			b.WriteString("...\n")
			break
		}
		b.WriteString("  " + describeMsg(m) + "\n")
	}
	return b.String()
}
