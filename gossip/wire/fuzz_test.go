package wire

import (
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
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzDecode from validMessages")

const corpusDir = "testdata/fuzz/FuzzDecode"

// The checked-in seed corpus holds a valid message of every kind x values
// x compress; each decodes. Regenerate with
// go test ./gossip/wire -run TestFuzzSeedCorpus -update-corpus.
func TestFuzzSeedCorpus(t *testing.T) {
	msgs := validMessages(t)
	if *updateCorpus {
		if err := os.MkdirAll(corpusDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, msg := range msgs {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(msg)))
			if err := os.WriteFile(filepath.Join(corpusDir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := NewCodec(F32, None, DefaultLimits())
	var m Message
	compressed := map[Compress]bool{}
	for name := range msgs {
		raw, err := os.ReadFile(filepath.Join(corpusDir, name))
		if err != nil {
			t.Fatalf("seed %s missing (run with -update-corpus): %v", name, err)
		}
		lines := strings.SplitN(string(raw), "\n", 3)
		if len(lines) < 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("seed %s: not a fuzz corpus file", name)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("seed %s: %v", name, err)
		}
		if err := c.Decode([]byte(s), &m); err != nil {
			t.Fatalf("seed %s does not decode: %v", name, err)
		}
		if !strings.HasPrefix(name, m.Kind.String()) || (m.Kind.Sparse() && !strings.Contains(name, "-"+m.Values.String()+"-")) {
			t.Fatalf("seed %s decodes as %s/%s", name, m.Kind, m.Values)
		}
		compressed[m.Compress] = true
	}
	for _, cp := range allCompress {
		if !compressed[cp] {
			t.Errorf("no seed travels with %s", cp)
		}
	}
}

// FuzzDecode: no input panics or breaks the decoder's promises. Every
// error wraps exactly one sentinel; every accepted message satisfies the
// invariants and survives re-encoding.
func FuzzDecode(f *testing.F) {
	for _, msg := range validMessages(f) {
		f.Add(msg)
	}
	lim := DefaultLimits()
	lim.MaxMessage = 1 << 16
	lim.Features = 1<<24 + 1
	c := NewCodec(F32, None, lim)
	f.Fuzz(func(t *testing.T, msg []byte) {
		// Fresh messages for every input: a reused one keeps, say, an
		// empty non-nil list where a fresh decode has nil, and the
		// comparison below would depend on the inputs before (a fuzz
		// run failed on a params-ack that passed alone).
		var m, m2 Message
		err := c.Decode(msg, &m)
		if err != nil {
			if _, n := sentinelOf(err); n != 1 {
				t.Fatalf("error wraps %d sentinels: %v", n, err)
			}
			return
		}
		if m.Version != Version || !m.Kind.known() || m.Part >= m.Parts {
			t.Fatalf("accepted header %+v", m.Header)
		}
		if m.Kind == KindCore {
			if m.Parts > 1 {
				return
			}
			if err := m.Core.Check(lim); err != nil {
				t.Fatalf("accepted a core message that fails Check: %v", err)
			}
			re := NewCodec(m.Values, None, lim)
			out, err := re.AppendCore(nil, m.Header, &m.Core)
			if err != nil {
				t.Fatalf("re-encode core: %v", err)
			}
			if err := re.Decode(out, &m2); err != nil {
				t.Fatalf("re-decode core: %v", err)
			}
			if !m.Values.Lossy() && !coreEqual(&m2.Core, &m.Core) {
				t.Fatalf("re-decoded core message differs")
			}
			return
		}
		if !m.Kind.Sparse() {
			return
		}
		s := &m.Sparse
		if m.Width < 1 || m.Width > lim.MaxWidth || s.Len() > lim.MaxRows || !s.Sorted(m.Width) {
			t.Fatalf("accepted width %d rows %d sorted %v", m.Width, s.Len(), s.Sorted(m.Width))
		}
		for i, k := range s.Idx {
			if uint64(k) >= lim.Features {
				t.Fatalf("row %d: index %d", i, k)
			}
		}
		for i, v := range s.Val {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("value %d is %v", i, v)
			}
		}
		// Re-encode what was decoded in the same format: F32 and F16 values
		// come back bit for bit (they are already representable), I8 within
		// the new message's half quantum.
		re := NewCodec(m.Values, None, lim)
		var out []byte
		switch m.Kind {
		case KindGrad:
			out, err = re.AppendGrad(nil, m.Header, m.Examples, m.Width, s)
		case KindParams:
			out, err = re.AppendParams(nil, m.Header, m.Width, s)
		default:
			out, err = re.AppendParamsAck(nil, m.Header, &m.Ack, m.Width, s)
		}
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if err := re.Decode(out, &m2); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !slices.Equal(m2.Sparse.Idx, s.Idx) || m2.Examples != m.Examples || m2.Width != m.Width ||
			m2.Kind != m.Kind || (m.Kind == KindParamsAck && !reflect.DeepEqual(m2.Ack, m.Ack)) {
			t.Fatalf("re-decoded rows differ")
		}
		checkValues(t, m.Values, s.Val, m2.Sparse.Val)
	})
}
