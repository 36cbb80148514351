package data

import (
	"fmt"
	"slices"
	"strings"
)

// fnvPrime is the 32-bit FNV prime, with which VW combines the hashes of
// the features of an interaction (VW's FNV_PRIME, interactions_predict.h).
const fnvPrime = 16777619

// InteractionHash combines the 32-bit hashes of the features of one
// interaction as VW does: h = h1, then h = (h * 16777619) ^ hk for each
// further feature, in uint32 arithmetic. The interaction's feature is h
// modulo Dim (with a power-of-two Dim, VW's mask of the low bits).
func InteractionHash(h ...uint32) uint32 {
	if len(h) == 0 {
		return 0
	}
	x := h[0]
	for _, k := range h[1:] {
		x = x*fnvPrime ^ k
	}
	return x
}

// maxInteractionTerms is the most namespaces one interaction crosses:
// VW's -q (2) and --cubic (3).
const maxInteractionTerms = 3

// ParseInteractions parses a comma-separated list of interactions, as
// --interactions takes it: "ab,abc" crosses namespaces a and b, and a, b
// and c. Each names 2 or 3 namespaces by their first character (any
// printable byte but ',', '|', ':' and blanks). The characters of each
// are sorted, as VW does by default (so "ba" is "ab"), and an interaction
// given twice is an error. "" is no interactions.
func ParseInteractions(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	seen := map[string]string{}
	for _, term := range strings.Split(s, ",") {
		t := strings.TrimSpace(term)
		if len(t) < 2 || len(t) > maxInteractionTerms {
			return nil, fmt.Errorf("%w: interaction %q: want 2 namespaces (VW's -q, e.g. ab) or 3 (--cubic, e.g. abc), each named by one character", ErrOptions, t)
		}
		for i := 0; i < len(t); i++ {
			if c := t[i]; c <= ' ' || c >= 0x7f || c == '|' || c == ':' {
				return nil, fmt.Errorf("%w: interaction %q: namespace character %q cannot name a namespace", ErrOptions, t, c)
			}
		}
		b := []byte(t)
		slices.Sort(b)
		key := string(b)
		if prev, ok := seen[key]; ok {
			return nil, fmt.Errorf("%w: interactions %q and %q are the same (the order of namespaces does not matter)", ErrOptions, prev, t)
		}
		seen[key] = t
		out = append(out, key)
	}
	return out, nil
}

// Criteo's columns as namespaces: I1..I13 are a..m, C1..C26 are A..Z.
const (
	criteoIntNamespaces = "abcdefghijklm"
	criteoCatNamespaces = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
)

// criteoNamespace is the namespace character of Criteo field 1..39.
func criteoNamespace(field int) byte {
	if field <= criteoIntColumns {
		return criteoIntNamespaces[field-1]
	}
	return criteoCatNamespaces[field-1-criteoIntColumns]
}

// checkInteractions checks interactions against the input's format: VW
// takes any namespace, Criteo a..m and A..Z, the others none.
func checkInteractions(list []string, f Format, name string) error {
	in := ""
	if name != "" {
		in = " " + name
	}
	switch f {
	case FormatVW, FormatAuto:
		return nil
	case FormatCriteo:
		for _, t := range list {
			for i := 0; i < len(t); i++ {
				if !strings.ContainsRune(criteoIntNamespaces+criteoCatNamespaces, rune(t[i])) {
					return fmt.Errorf("%w: interaction %q: Criteo input%s has namespaces a..m (columns I1..I13) and A..Z (C1..C26), not %q", ErrOptions, t, in, t[i])
				}
			}
		}
		return nil
	case FormatCache:
		return fmt.Errorf("%w: interactions (--interactions) cannot be added to cache input%s: its rows are already parsed; give the text input (a cache built with interactions holds them)", ErrOptions, in)
	}
	return fmt.Errorf("%w: interactions (--interactions) cross namespaces, and %v input%s has none (VW text and Criteo TSV have them)", ErrOptions, f, in)
}

// hashedFeature is one feature of a row as the interactions see it: its
// namespace, its 32-bit hash before reduction to Dim, its value.
type hashedFeature struct {
	h  uint32
	v  float32
	ns byte
}

// interactor adds a row's interaction features. It keeps the features of
// the namespaces that interactions name, in the order they came, and
// allocates nothing once its buffers have grown.
type interactor struct {
	terms [][]byte  // each interaction's namespaces, sorted
	need  [256]bool // namespaces some interaction names
	used  []byte    // the namespaces in need, once each
	feats []hashedFeature
	lists [256][]int32 // per namespace: positions in feats
}

func newInteractor(list []string) *interactor {
	if len(list) == 0 {
		return nil
	}
	x := &interactor{}
	for _, t := range list {
		x.terms = append(x.terms, []byte(t))
		for i := 0; i < len(t); i++ {
			if !x.need[t[i]] {
				x.need[t[i]] = true
				x.used = append(x.used, t[i])
			}
		}
	}
	return x
}

// reset starts a row.
func (x *interactor) reset() {
	x.feats = x.feats[:0]
	for _, c := range x.used {
		x.lists[c] = x.lists[c][:0]
	}
}

// add notes a feature of the row.
func (x *interactor) add(ns byte, h uint32, v float32) {
	if !x.need[ns] {
		return
	}
	x.lists[ns] = append(x.lists[ns], int32(len(x.feats)))
	x.feats = append(x.feats, hashedFeature{h: h, v: v, ns: ns})
}

// emit appends the row's interaction features to b: for each interaction,
// one per combination of a feature from each namespace, with index
// InteractionHash(h1, h2[, h3]) % dim and value v1*v2[*v3]. Within a
// namespace crossed with itself only combinations in order are made, each
// feature with itself included (VW's default without --permutations).
// Products that underflow to 0 are left out. TestVWGoodLines and
// TestVWHashMatchesReference pin the combinations and their indices.
func (x *interactor) emit(b *Batch, dim uint64) {
	f := x.feats
	for _, t := range x.terms {
		la, lb := x.lists[t[0]], x.lists[t[1]]
		if len(t) == 2 {
			same := t[0] == t[1]
			for i, p := range la {
				f1 := f[p]
				half := f1.h * fnvPrime
				from := 0
				if same {
					from = i
				}
				for _, q := range lb[from:] {
					f2 := f[q]
					if v := f1.v * f2.v; v != 0 {
						b.Add(uint32(uint64(half^f2.h)%dim), v)
					}
				}
			}
			continue
		}
		lc := x.lists[t[2]]
		same1, same2 := t[0] == t[1], t[1] == t[2]
		for i, p := range la {
			f1 := f[p]
			half1 := f1.h * fnvPrime
			j0 := 0
			if same1 {
				j0 = i
			}
			for j := j0; j < len(lb); j++ {
				f2 := f[lb[j]]
				half2 := (half1 ^ f2.h) * fnvPrime
				v12 := f1.v * f2.v
				k0 := 0
				if same2 {
					k0 = j
				}
				for _, r := range lc[k0:] {
					f3 := f[r]
					if v := v12 * f3.v; v != 0 {
						b.Add(uint32(uint64(half2^f3.h)%dim), v)
					}
				}
			}
		}
	}
}
