package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frames carry messages on a direct stream (a FetchReply and the messages
// that follow it): a uvarint length, then the message.

// AppendFrame appends msg to dst as one frame.
func AppendFrame(dst, msg []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(msg)))
	return append(dst, msg...)
}

// FrameReader is what ReadFrame reads from; *bufio.Reader is one.
type FrameReader interface {
	io.Reader
	io.ByteReader
}

// ReadFrame reads one frame from r into buf (grown if short, so pass the
// previous result back to reuse it) and returns the message. A length over
// max is ErrTooLarge, found before anything is read or allocated. A stream
// that ends cleanly between frames returns io.EOF; one that ends inside a
// frame returns an error wrapping ErrMalformed and io.ErrUnexpectedEOF.
func ReadFrame(r FrameReader, buf []byte, max int) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err == io.EOF {
		return buf[:0], io.EOF
	}
	if err != nil {
		return buf[:0], fmt.Errorf("%w: frame length: %w", ErrMalformed, err)
	}
	if n > uint64(max) {
		return buf[:0], fmt.Errorf("%w: frame of %d bytes, limit %d", ErrTooLarge, n, max)
	}
	buf = grow(buf, int(n))
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf[:0], fmt.Errorf("%w: frame of %d bytes: %w", ErrMalformed, n, err)
	}
	return buf, nil
}
