"""Export scikit-learn's bundled classification data sets as libsvm files.

Usage: /usr/bin/python3 scripts/realdata/sklearn_export.py OUTDIR

Writes OUTDIR/NAME.train and OUTDIR/NAME.test (1-based indices, raw feature
values, labels as the data set has them: 0/1 or class numbers 0..K-1) for
breast_cancer, digits, iris and wine: a stratified 80/20 split with a fixed
seed (random_state=0), so every run writes the same files. Needs Debian's
python3-sklearn; nothing is downloaded (these sets ship with scikit-learn).
"""
import os
import sys

from sklearn import datasets
from sklearn.model_selection import train_test_split


def write(path, X, y):
    with open(path, "w") as f:
        for row, label in zip(X, y):
            feats = " ".join("%d:%.10g" % (j + 1, v) for j, v in enumerate(row) if v != 0)
            f.write(("%d %s" % (label, feats)).rstrip() + "\n")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, load in [("breast_cancer", datasets.load_breast_cancer), ("digits", datasets.load_digits),
                       ("iris", datasets.load_iris), ("wine", datasets.load_wine)]:
        X, y = load(return_X_y=True)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
        write(os.path.join(out, name + ".train"), Xtr, ytr)
        write(os.path.join(out, name + ".test"), Xte, yte)


if __name__ == "__main__":
    main()
