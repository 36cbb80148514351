// Package usage marks the errors that come from how a command was called:
// a flag's value that cannot work, a file a flag names that is missing, an
// argument too many. The command line prints such an error with a hint to
// the command's --help and exits with status 2; any other error exits 1.
//
// The packages behind the commands (infer, job, cluster) return these
// errors themselves, naming the flag at fault, since they are the ones that
// find out (a --dim the data contradicts, a --checkpoint-dir with no
// checkpoint): the message is theirs, the exit status the command line's.
package usage

import (
	"errors"
	"fmt"
)

// ErrUsage is wrapped by every usage error: errors.Is(err, ErrUsage).
var ErrUsage = errors.New("usage")

// Flag returns a usage error naming the flag at fault: "usage: --dim: …".
func Flag(name, format string, args ...any) error {
	return fmt.Errorf("%w: --%s: %s", ErrUsage, name, fmt.Sprintf(format, args...))
}

// Errorf returns a usage error that names no single flag: "usage: …".
func Errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// Wrap makes err a usage error ("usage: " and err's message), keeping it
// for errors.Is and errors.As; nil stays nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrUsage, err)
}
