package data_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gossiptrain/gossiptrain/data"
)

// The reading loop: one Batch, reused for every call to Next.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "train.svm")
	os.WriteFile(path, []byte("+1 3:1 1:0.5\n-1 2:1\n# comment\n+1 4:2\n"), 0o644)

	src, err := data.Open([]string{filepath.Join(dir, "*.svm")}, data.Options{Dim: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer src.Close()
	var b data.Batch
	for {
		n, err := src.Next(&b, 2)
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		for r := range n {
			idx, val := b.Row(r)
			fmt.Println(b.Labels[r], idx, val)
		}
	}
	fmt.Printf("%+v\n", src.Stats())
	// Output:
	// 1 [0 2] [0.5 1]
	// 0 [1] [1]
	// 1 [3] [2]
	// {Rows:3 NNZ:4 BadLines:0 Bytes:37}
}

// A bad line names the file, the line and the token.
func ExampleLineError() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "adult.svm"), []byte("1 1:1\n0 3:x\n"), 0o644)

	src, _ := data.Open([]string{filepath.Join(dir, "adult.svm")}, data.Options{})
	defer src.Close()
	var b data.Batch
	_, err := src.Next(&b, 10)
	var le *data.LineError
	if errors.As(err, &le) {
		fmt.Printf("line %d, token %q: %v (bad line: %v)\n", le.Line, le.Token, le.Err, errors.Is(err, data.ErrBadLine))
	}
	// Output:
	// line 2, token "3:x": value is not a number (bad line: true)
}
