# scikit-learn baseline for the README speed figure: load a libsvm file and
# run one epoch of SGDClassifier (log loss). Usage: python3 sklearn_baseline.py FILE
import sys, time
t0=time.time()
from sklearn.datasets import load_svmlight_file
from sklearn.linear_model import SGDClassifier
X,y=load_svmlight_file(sys.argv[1], n_features=16777216)
t1=time.time()
clf=SGDClassifier(loss='log_loss', max_iter=1, tol=None)
clf.fit(X,y)
t2=time.time()
print(f"load {t1-t0:.2f}s fit {t2-t1:.2f}s total {t2-t0:.2f}s nnz/s fit {X.nnz/(t2-t1)/1e6:.1f}M")
