# Export the two statlog multiclass sets that LIBSVM's data page ships as
# "letter" and "dna", from Debian's r-cran-mlbench (LetterRecognition, DNA),
# as libsvm files.
#
# Usage: Rscript scripts/realdata/mlbench_export.R OUTDIR
#
# letter: 20,000 rows, 16 integer features 0..15 (unscaled), 26 classes
#   (A..Z as 1..26); first 15,000 rows train, last 5,000 test, LIBSVM's split.
# dna: 3,186 rows, 180 binary features, 3 classes (ei, ie, n as 1..3);
#   first 2,000 rows train, last 1,186 test, the statlog split.
args <- commandArgs(trailingOnly = TRUE)
out <- args[1]
dir.create(out, showWarnings = FALSE, recursive = TRUE)
suppressMessages(library(mlbench))

write_libsvm <- function(path, X, y) {
  lines <- vapply(seq_len(nrow(X)), function(i) {
    v <- X[i, ]
    nz <- which(v != 0)
    paste(c(as.character(y[i]), if (length(nz)) paste0(nz, ":", format(v[nz], scientific = FALSE, trim = TRUE))), collapse = " ")
  }, "")
  writeLines(lines, path)
}

data(LetterRecognition)
X <- as.matrix(LetterRecognition[, -1])
y <- as.integer(LetterRecognition$lettr)
write_libsvm(file.path(out, "letter.train"), X[1:15000, ], y[1:15000])
write_libsvm(file.path(out, "letter.test"), X[15001:20000, ], y[15001:20000])

data(DNA)
X <- sapply(DNA[, 1:180], function(col) as.integer(as.character(col)))
y <- as.integer(DNA$Class)
write_libsvm(file.path(out, "dna.train"), X[1:2000, ], y[1:2000])
write_libsvm(file.path(out, "dna.test"), X[2001:3186, ], y[2001:3186])
