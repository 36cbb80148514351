#!/usr/bin/python3
"""Score libsvm rows with a model exported by 'gossiptrain export', using numpy alone.

    score_export.py EXPORT DATA

EXPORT is a .npz, .json or .txt export; DATA a libsvm file (.gz allowed), labelled or not.
Prints one line per row: P(class 1) for logreg, one probability per class otherwise, as
'gossiptrain predict' does. The model package's tests run it (TestExportScoredByNumpy);
docs/usage.md ("Exporting a model") shows the same steps.
"""
import gzip
import json
import re
import sys

import numpy as np


def load(path):
    """Returns a dict of the export's metadata and parameters as numpy arrays."""
    if path.endswith(".npz"):
        z = np.load(path)  # no pickle: every array is plain
        d = {k: z[k] for k in z.files}
        for k in ("kind", "input_format"):
            d[k] = str(d[k])
        for k in ("dim", "classes", "hidden", "label_base"):
            d[k] = int(d[k])
        d["zero_based"] = bool(d["zero_based"])
        return d
    if path.endswith(".json"):
        with open(path) as f:
            d = json.load(f)
        for k in ("bias", "weight", "w2", "b2"):
            if k in d:
                d[k] = np.asarray(d[k], dtype=np.float32)
        d["index"] = np.asarray(d["index"], dtype=np.int64)
        return d
    # text: the metadata in the first comment line, then index<TAB>values rows.
    with open(path) as f:
        head = f.readline()
    meta = dict(re.findall(r"(\w+) (\"[^\"]*\"|[^,]+)", head.split(":", 1)[1]))
    d = {"kind": meta["kind"], "dim": int(meta["dim"]), "classes": int(meta["classes"]),
         "hidden": int(meta["hidden"]), "zero_based": meta["zero_based"] == "true"}
    rows = np.loadtxt(path, comments="#", delimiter="\t", ndmin=2)
    idx, val = rows[:, 0].astype(np.int64), rows[:, 1:].astype(np.float32)
    dim, c = d["dim"], d["classes"]
    feat = idx < dim
    d["index"], d["weight"] = idx[feat], val[feat]
    rest = {int(k): v for k, v in zip(idx[~feat], val[~feat])}
    if d["kind"] == "logreg":
        d["weight"] = d["weight"][:, 0]
        d["bias"] = rest[dim][0]
    elif d["kind"] == "softmax":
        d["bias"] = rest[dim]
    else:
        h = d["hidden"]
        zero = np.zeros(h, dtype=np.float32)
        d["bias"] = rest.get(dim, zero)
        d["w2"] = np.stack([rest.get(dim + 1 + j, zero) for j in range(c)])
        d["b2"] = rest.get(dim + c + 1, zero)[:c]
    return d


def rows(path, zero_based):
    """Yields (indices, values) of each libsvm row: 0-based model indices."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            toks = line.split()
            if ":" not in toks[0]:
                toks = toks[1:]  # the label
            pairs = [t.split(":") for t in toks]
            idx = np.array([int(i) for i, _ in pairs], dtype=np.int64)
            if not zero_based:
                idx -= 1
            yield idx, np.array([float(v) for _, v in pairs], dtype=np.float64)


def main():
    d = load(sys.argv[1])
    dim, kind = d["dim"], d["kind"]
    w = np.zeros((dim,) + d["weight"].shape[1:], dtype=np.float64)
    w[d["index"]] = d["weight"]
    out = []
    for idx, val in rows(sys.argv[2], d["zero_based"]):
        keep = idx < dim
        z = val[keep] @ w[idx[keep]] + d["bias"]
        if kind == "logreg":
            out.append("%.17g" % (1 / (1 + np.exp(-z))))
            continue
        if kind == "mlp":
            hid = np.maximum(z, 0)
            z = d["w2"].astype(np.float64) @ hid + d["b2"]
        p = np.exp(z - z.max())
        p /= p.sum()
        out.append(" ".join("%.17g" % x for x in p))
    print("\n".join(out))


main()
