package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSplitData(t *testing.T) {
	dir := t.TempDir()
	for i := 1; i <= 3; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("train-%d.svm", i)), []byte("1 1:1\n"), 0o644)
	}
	one := filepath.Join(dir, "train-1.svm")
	all := filepath.Join(dir, "train-*.svm")
	for _, c := range []struct {
		patterns []string
		peers    int
		common   string
		peer1    string
	}{
		{[]string{all}, 3, "", "--train " + filepath.Join(dir, "train-2.svm")},
		{[]string{all}, 2, "--train " + all, "--part 2/2"},
		{[]string{one}, 4, "--train " + one, "--part 2/4"},
	} {
		s, err := splitData(c.patterns, c.peers)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(s.common, " "); got != c.common {
			t.Errorf("%v over %d peers: common %q, want %q", c.patterns, c.peers, got, c.common)
		}
		if got := strings.Join(s.own(1), " "); got != c.peer1 {
			t.Errorf("%v over %d peers: peer 1 gets %q, want %q", c.patterns, c.peers, got, c.peer1)
		}
	}
}

// shipFiles: one file per host ships each its own, with the test set and
// IDX labels; --part ships every file to every host, patterns becoming
// the shipped names.
func TestShipFiles(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"train-1.svm", "train-2.svm", "test.svm", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"} {
		os.WriteFile(filepath.Join(dir, f), []byte("1 1:1\n"), 0o644)
	}
	pattern := filepath.Join(dir, "train-*.svm")
	for _, c := range []struct {
		name  string
		hosts int
		test  string
		want  [][]string // shipped names per host
		args  []string   // host 1's train flags, rewritten
	}{
		{"file per host", 2, filepath.Join(dir, "test.svm"),
			[][]string{{"data/train-1.svm", "data/test.svm"}, {"data/train-2.svm", "data/test.svm"}},
			[]string{"--train", "data/train-2.svm"}},
		{"part", 3, filepath.Join(dir, "t10k-images-idx3-ubyte"),
			[][]string{{"data/train-1.svm", "data/train-2.svm", "data/t10k-images-idx3-ubyte", "data/t10k-labels-idx1-ubyte"}},
			[]string{"--train", "data/train-1.svm,data/train-2.svm", "--part", "2/3"}},
	} {
		split, err := splitData([]string{pattern}, c.hosts)
		if err != nil {
			t.Fatal(err)
		}
		pass := []string{"--train=" + pattern, "--test=" + c.test, "--batch=10"}
		s, err := shipFiles(pass, split, c.hosts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for i, want := range c.want {
			var got []string
			for _, f := range s.files[i] {
				got = append(got, s.rename[f])
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("%s: host %d ships %v, want %v", c.name, i, got, want)
			}
		}
		got := s.rewrite(append(append([]string(nil), split.common...), split.own(1)...))
		if strings.Join(got, " ") != strings.Join(c.args, " ") {
			t.Errorf("%s: host 1's train flags %v, want %v", c.name, got, c.args)
		}
		if r := s.rewrite([]string{"--test=" + c.test}); r[0] != "--test=data/"+filepath.Base(c.test) {
			t.Errorf("%s: --test rewritten to %s", c.name, r[0])
		}
	}
}

// Files that are a multiple of the peers: each peer reads every n-th file,
// whole; a scaling series generates a number of files every count divides.
func TestClusterSplitDataWholeFiles(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i := 1; i <= 4; i++ {
		f := filepath.Join(dir, fmt.Sprintf("train-%d.svm", i))
		os.WriteFile(f, []byte("1 1:1\n"), 0o644)
		files = append(files, f)
	}
	s, err := splitData([]string{filepath.Join(dir, "train-*.svm")}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.common) != 0 || strings.Join(s.own(1), " ") != "--train "+files[1]+","+files[3] {
		t.Errorf("4 files over 2 peers: common %q, peer 1 %q; want files 2 and 4", s.common, s.own(1))
	}
	for _, c := range []struct {
		counts []int
		rows   int64
		want   int
	}{{[]int{1, 2, 4, 8}, 1000, 8}, {[]int{1, 2, 3, 4}, 1000, 12}, {[]int{1, 2, 4}, 3, 4}, {[]int{5, 7, 9, 11}, 10000, 11}} {
		if got := seriesParts(c.counts, c.rows); got != c.want {
			t.Errorf("seriesParts(%v, %d) = %d, want %d", c.counts, c.rows, got, c.want)
		}
	}
}
