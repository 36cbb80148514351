package data

// Source streams rows of a data set into caller-owned batches.
//
// Next resets b and appends up to max complete rows; it returns the number
// of rows appended. At the end of the input it returns 0 rows and io.EOF.
// A bad line stops the source with a *LineError unless Options.SkipBad is
// set. A Source is not safe for concurrent use.
type Source interface {
	Next(b *Batch, max int) (int, error)
	Stats() Stats
	Close() error
}

// Stats counts what a Source has read so far.
type Stats struct {
	Rows     int64 // rows returned
	NNZ      int64 // nonzeros returned
	BadLines int64 // lines skipped because they were bad (Options.SkipBad)
	Bytes    int64 // bytes read from disk (compressed size for compressed files)
}
