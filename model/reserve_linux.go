package model

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// addressLimits returns the finite limits among RLIMIT_AS (against
// VmSize, every mapping) and RLIMIT_DATA (against VmData, the private
// writable mappings the Go heap is made of), with what the process has
// mapped under each (/proc/self/status). Limits that cannot be read are
// left out.
func addressLimits() []addressLimit {
	var out []addressLimit
	var status []byte
	for _, l := range []struct {
		res   int
		name  string
		field string
	}{
		{syscall.RLIMIT_AS, "RLIMIT_AS", "VmSize:"},
		{syscall.RLIMIT_DATA, "RLIMIT_DATA", "VmData:"},
	} {
		var r syscall.Rlimit
		if err := syscall.Getrlimit(l.res, &r); err != nil || r.Cur == ^uint64(0) || r.Cur > 1<<62 {
			continue
		}
		if status == nil {
			b, err := os.ReadFile("/proc/self/status")
			if err != nil {
				return nil
			}
			status = b
		}
		used, ok := statusKiB(status, l.field)
		if !ok {
			continue
		}
		out = append(out, addressLimit{name: l.name, limit: int64(r.Cur), inUse: used})
	}
	return out
}

// statusKiB returns the bytes of a "Field:   123 kB" line of
// /proc/self/status.
func statusKiB(status []byte, field string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == field {
			v, err := strconv.ParseInt(string(f[1]), 10, 64)
			return v << 10, err == nil
		}
	}
	return 0, false
}
