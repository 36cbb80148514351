#!/usr/bin/python3
"""An independent reference for gossiptrain's VW reader (data/vw.go).

It implements, from Vowpal Wabbit's documented definitions and nothing in
gossiptrain, the hashing of VW text lines:

  hash(s, seed)  = int(s) + seed           if s is all decimal digits
                 = murmur3_x86_32(s, seed) otherwise (MurmurHash3, Appleby)
  namespace hash = hash(name, 0), 0 for the default namespace
  feature hash   = hash(feature name, namespace hash)
  feature        = hash mod dim
  interaction    = (h1 * 16777619) ^ h2 (then * 16777619 ^ h3), mod 2^32,
                   then mod dim; values multiply; a namespace crossed with
                   itself gives the pairs i <= j

and prints each line's sorted (index, value) pairs, summing the values of
equal indices, as JSON: one object per line {"label", "weight", "row"}.

Usage: vwhash.py DIM INTERACTIONS < lines    (INTERACTIONS e.g. "ab,abc" or "")

With --fit TRAIN TEST DIM INTERACTIONS it instead fits scikit-learn's
LogisticRegression (C given by --C, default 1e4: nearly unregularised) on
the hashed training rows and prints the test log-loss as JSON.

It reads the subset of the format the tests write: label [weight] ['tag]
then |namespace feature[:value] ... groups; no string values, no
namespace scales.
"""
import json
import sys

MASK = 0xFFFFFFFF
FNV = 16777619


def rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & MASK


def murmur3_32(data, seed):
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & MASK
    n = len(data)
    for i in range(0, n - n % 4, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * c1) & MASK
        k = rotl(k, 15)
        k = (k * c2) & MASK
        h ^= k
        h = rotl(h, 13)
        h = (h * 5 + 0xE6546B64) & MASK
    tail = data[n - n % 4:]
    k = 0
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if len(tail) >= 1:
        k ^= tail[0]
        k = (k * c1) & MASK
        k = rotl(k, 15)
        k = (k * c2) & MASK
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK
    h ^= h >> 16
    return h


def vwhash(s, seed):
    if s != "" and s.isdigit() and s.isascii():
        return (int(s) + seed) & MASK
    if s == "":
        return seed & MASK
    return murmur3_32(s.encode(), seed)


def parse(line, dim, inters):
    bar = line.index("|")
    head = line[:bar].split()
    if head and (head[-1].startswith("'") or not line[:bar].endswith((" ", "\t"))):
        head = head[:-1]  # the tag
    label = float(head[0]) if head else None
    weight = float(head[1]) if len(head) > 1 else 1.0
    feats = []  # (namespace char, hash, value)
    for group in line[bar + 1:].split("|"):
        if group == "" or group[0] in " \t":
            ns, nshash, rest = " ", 0, group
        else:
            name, _, rest = group.partition(" ")
            ns, nshash = name[0], vwhash(name, 0)
        for tok in rest.split():
            name, colon, val = tok.partition(":")
            v = float(val) if colon else 1.0
            if v != 0:
                feats.append((ns, vwhash(name, nshash), v))
    out = {}

    def put(h, v):
        k = h % dim
        out[k] = out.get(k, 0.0) + v

    for _, h, v in feats:
        put(h, v)
    for t in inters:
        t = "".join(sorted(t))
        lists = [[f for f in feats if f[0] == c] for c in t]
        if len(t) == 2:
            for i, f1 in enumerate(lists[0]):
                start = i if t[0] == t[1] else 0
                for f2 in lists[1][start:]:
                    put(((f1[1] * FNV) & MASK) ^ f2[1], f1[2] * f2[2])
        else:
            for i, f1 in enumerate(lists[0]):
                j0 = i if t[0] == t[1] else 0
                for j in range(j0, len(lists[1])):
                    f2 = lists[1][j]
                    half = (((((f1[1] * FNV) & MASK) ^ f2[1]) * FNV) & MASK)
                    k0 = j if t[1] == t[2] else 0
                    for f3 in lists[2][k0:]:
                        put(half ^ f3[1], f1[2] * f2[2] * f3[2])
    row = sorted((k, v) for k, v in out.items() if v != 0)
    return label, weight, row


def load(path, dim, inters):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.strip():
                rows.append(parse(line, dim, inters))
    return rows


def fit(train, test, dim, inters, C):
    import numpy as np
    from scipy.sparse import csr_matrix
    from sklearn.linear_model import LogisticRegression

    def matrix(rows):
        data, ind, ptr, y, w = [], [], [0], [], []
        for label, weight, row in rows:
            for k, v in row:
                ind.append(k)
                data.append(v)
            ptr.append(len(ind))
            y.append(1 if label > 0 else 0)
            w.append(weight)
        return csr_matrix((data, ind, ptr), shape=(len(rows), dim)), np.array(y), np.array(w)

    X, y, w = matrix(load(train, dim, inters))
    Xt, yt, wt = matrix(load(test, dim, inters))
    m = LogisticRegression(C=C, max_iter=10000, tol=1e-8)
    m.fit(X, y, sample_weight=w)
    p = np.clip(m.predict_proba(Xt)[:, 1], 1e-15, 1 - 1e-15)
    ll = -(wt * (yt * np.log(p) + (1 - yt) * np.log(1 - p))).sum() / wt.sum()
    return float(ll)


def main():
    args = sys.argv[1:]
    C = 1e4
    if "--C" in args:
        i = args.index("--C")
        C = float(args[i + 1])
        del args[i:i + 2]
    if args and args[0] == "--fit":
        train, test, dim = args[1], args[2], int(args[3])
        inters = [t for t in (args[4] if len(args) > 4 else "").split(",") if t]
        print(json.dumps({"logloss": fit(train, test, dim, inters, C)}))
        return
    dim = int(args[0])
    inters = [t for t in (args[1] if len(args) > 1 else "").split(",") if t]
    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        label, weight, row = parse(line, dim, inters)
        print(json.dumps({"label": label, "weight": weight, "row": row}))


if __name__ == "__main__":
    main()
