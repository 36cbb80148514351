package data

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// One goroutine reads a Shared source while another polls Stats (run
// with -race): Stats only grows, and ends at what the reader saw.
func TestSharedStats(t *testing.T) {
	var text strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&text, "%d %d:1 %d:0.5\n", i%2, 1+i%7, 8+i%5)
	}
	path := writeFile(t, t.TempDir(), "train.svm", text.String())
	src, err := Open([]string{path}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := Shared(src)
	if st := s.Stats(); st.Rows != 0 {
		t.Fatalf("Stats before reading: %+v", st)
	}
	done := make(chan Stats)
	go func() {
		var b Batch
		for {
			if _, err := s.Next(&b, 100); err != nil {
				if err != io.EOF {
					t.Error(err)
				}
				done <- src.Stats()
				return
			}
		}
	}()
	var last Stats
	for polling := true; polling; {
		select {
		case final := <-done:
			if got := s.Stats(); got != final || final.Rows != 5000 || final.NNZ != 10000 {
				t.Errorf("Stats after the last Next = %+v; the source says %+v, want 5000 rows, 10000 nonzeros", got, final)
			}
			polling = false
		default:
			st := s.Stats()
			if st.Rows < last.Rows || st.Bytes < last.Bytes {
				t.Fatalf("Stats went back from %+v to %+v", last, st)
			}
			last = st
		}
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}
