package wire

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gossiptrain/gossiptrain/model"
)

// Synthetic Criteo-like gradients for tests and benchmarks.
//
// 39 one-hot fields hashed into 2^24 features plus a bias row (index 2^24).
// Field vocabularies: the 26 categorical fields have the cardinalities of
// the Criteo Kaggle display-advertising data set (as tabulated in, e.g.,
// Naumov et al., "Deep Learning Recommendation Model for Personalization and
// Recommendation Systems", arXiv:1906.00091, 2019); the 13 integer fields
// are log-bucketed into 10..190 values. Each field draws Zipf(s = 1.1)
// ranks: a few values are very common, most are rare. A row's gradient is
// p - y on every feature it touches (and on the bias), with y ~ Bernoulli(p)
// and p = sigmoid(m), m ~ N(-1.2, 1): about a quarter of rows are clicks and
// |p - y| spreads over 0.01..1, as early in training.

const (
	criteoDim    = 1 << 24
	criteoFields = 39
	criteoShards = 256
)

var criteoCategorical = [26]uint64{
	1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
	27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
}

type criteoGen struct {
	r      *rand.Rand
	fields []*rand.Zipf
	acc    map[uint32]float32
}

func newCriteoGen(seed uint64) *criteoGen {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	g := &criteoGen{r: r, acc: make(map[uint32]float32)}
	for i := 0; i < 13; i++ {
		g.fields = append(g.fields, rand.NewZipf(r, 1.1, 1, uint64(10+15*i)-1))
	}
	for _, v := range criteoCategorical {
		g.fields = append(g.fields, rand.NewZipf(r, 1.1, 1, v-1))
	}
	return g
}

// hashFeature spreads (field, value) uniformly over [0, 2^24), like the
// hashing trick does.
func hashFeature(field int, v uint64) uint32 {
	h := uint64(field+1)*0x9E3779B97F4A7C15 ^ v*0xC2B2AE3D27D4EB4F
	h ^= h >> 31
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 29
	return uint32(h & (criteoDim - 1))
}

// batch returns the summed gradient of rows rows as a sorted Sparse of
// width 1 and the number of nonzeros before merging duplicates.
func (g *criteoGen) batch(rows int) (s model.Sparse, raw int) {
	clear(g.acc)
	for i := 0; i < rows; i++ {
		p := 1 / (1 + math.Exp(-(g.r.NormFloat64() - 1.2)))
		y := 0.0
		if g.r.Float64() < p {
			y = 1
		}
		d := float32(p - y)
		for f, z := range g.fields {
			g.acc[hashFeature(f, z.Uint64())] += d
			raw++
		}
		g.acc[criteoDim] += d // bias
		raw++
	}
	keys := make([]uint32, 0, len(g.acc))
	for k := range g.acc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s.Append(k, []float32{g.acc[k]})
	}
	return s, raw
}

// owners assigns the 256 shards to peers at random, equally, and splits s
// by owner of shard k & 255.
func splitByOwner(s *model.Sparse, peers int, seed uint64) []model.Sparse {
	r := rand.New(rand.NewPCG(seed, 7))
	owner := make([]int, criteoShards)
	for i := range owner {
		owner[i] = i % peers
	}
	r.Shuffle(len(owner), func(i, j int) { owner[i], owner[j] = owner[j], owner[i] })
	out := make([]model.Sparse, peers)
	for i, k := range s.Idx {
		o := owner[k&(criteoShards-1)]
		out[o].Append(k, s.Val[i:i+1])
	}
	return out
}

// peerID is a realistic 52-character libp2p peer ID string.
const peerID = "12D3KooWGzBTz6yjNNkpe4ZiZzFRtaWm7jdQVrDPt4dUvnbskFmT"
