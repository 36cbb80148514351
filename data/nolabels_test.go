package data

import (
	"strings"
	"testing"
)

// With NoLabels, libsvm lines may or may not start with a label (any
// token, unread), Criteo lines may lack the label column, and IDX images
// need no labels file; every row is returned, in order, with label 0.
func TestNoLabels(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "a.svm", "1 1:1 3:2\n3:1 4:0.5\n# comment\n\nwhatever 2:1\nqid:3 1:1\n-1 qid:2 2:2\n")
	b := openAll(t, []string{p}, Options{NoLabels: true})
	want := []row{
		{0, []uint32{0, 2}, []float32{1, 2}},
		{0, []uint32{2, 3}, []float32{1, 0.5}},
		{0, []uint32{1}, []float32{1}},
		{0, []uint32{0}, []float32{1}},
		{0, []uint32{1}, []float32{2}},
	}
	if got := rows(&b); !equalRows(got, want) {
		t.Errorf("libsvm rows\n%v\nwant\n%v", got, want)
	}
	cols := make([]string, 39)
	cols[0] = "5"
	cols[13] = "68fd1e64"
	labelled := "1\t" + strings.Join(cols, "\t")
	c := writeFile(t, dir, "a.tsv", labelled+"\n"+strings.Join(cols, "\t")+"\n")
	b = openAll(t, []string{c}, Options{NoLabels: true, Format: FormatCriteo, Dim: 1 << 20})
	if r := rows(&b); len(r) != 2 || !equalRows(r[:1], r[1:]) {
		t.Errorf("criteo rows with and without the label column: %v", r)
	}
	if _, err := Open([]string{c}, Options{Format: FormatCriteo, Dim: 1 << 20}); err != nil {
		t.Fatal(err)
	}
}
