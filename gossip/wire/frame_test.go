package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrames(t *testing.T) {
	msgs := [][]byte{[]byte("reply"), {}, bytes.Repeat([]byte{7}, 300)}
	var stream []byte
	for _, m := range msgs {
		stream = AppendFrame(stream, m)
	}
	// 1+5, 1+0, 2+300 bytes
	if len(stream) != 6+1+302 {
		t.Fatalf("stream of %d bytes, want 309", len(stream))
	}
	r := bufio.NewReader(bytes.NewReader(stream))
	var buf []byte
	for i, want := range msgs {
		var err error
		buf, err = ReadFrame(r, buf, 1000)
		if err != nil || !bytes.Equal(buf, want) {
			t.Fatalf("frame %d: %q, %v", i, buf, err)
		}
	}
	if _, err := ReadFrame(r, buf, 1000); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	// Cut inside a frame.
	for _, cut := range []int{3, 8, 100} { // inside frame 1, inside frame 3's length, inside its body
		r := bufio.NewReader(bytes.NewReader(stream[:cut]))
		var err error
		for err == nil {
			_, err = ReadFrame(r, nil, 1000)
		}
		if !errors.Is(err, ErrMalformed) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d: %v", cut, err)
		}
	}
	// Over the limit: refused before reading the body.
	r = bufio.NewReader(bytes.NewReader(AppendFrame(nil, make([]byte, 2000))))
	if _, err := ReadFrame(r, nil, 1999); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
}
