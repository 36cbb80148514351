package usage

import (
	"errors"
	"io/fs"
	"testing"
)

// A usage error says so (errors.Is ErrUsage) and reads as the command line
// prints it: "usage: --flag: what is wrong".
func TestUsageErrors(t *testing.T) {
	if err := Flag("dim", "want at least %d, got %d", 1, 0); !errors.Is(err, ErrUsage) || err.Error() != "usage: --dim: want at least 1, got 0" {
		t.Errorf("Flag: %v", err)
	}
	if err := Errorf("unexpected argument %q", "x"); !errors.Is(err, ErrUsage) || err.Error() != `usage: unexpected argument "x"` {
		t.Errorf("Errorf: %v", err)
	}
	err := Wrap(fs.ErrNotExist)
	if !errors.Is(err, ErrUsage) || !errors.Is(err, fs.ErrNotExist) || err.Error() != "usage: file does not exist" {
		t.Errorf("Wrap: %v", err)
	}
	if Wrap(nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
}
