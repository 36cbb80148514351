package report

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

// Sampler measures the resources of the current process from /proc. On
// systems without /proc the figures it cannot read are zero (CPU falls back
// to Go's runtime figures where possible).
type Sampler struct {
	start    time.Time
	startCPU time.Duration
}

// NewSampler starts measuring now.
func NewSampler() *Sampler {
	return &Sampler{start: time.Now(), startCPU: processCPU()}
}

// Sample returns the resources used since NewSampler.
func (s *Sampler) Sample() Resources {
	wall := time.Since(s.start)
	cpu := processCPU() - s.startCPU
	var pct float64
	if wall > 0 {
		pct = 100 * cpu.Seconds() / wall.Seconds()
	}
	return Resources{
		CPUPercent:    Num(pct),
		PeakRSSBytes:  peakRSS(),
		DiskReadBytes: diskRead(),
	}
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// processCPU is user+system CPU time of the process.
func processCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(string(f[11]), 10, 64)
	st, _ := strconv.ParseInt(string(f[12]), 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// peakRSS is VmHWM from /proc/self/status, in bytes.
func peakRSS() int64 {
	v := procField("/proc/self/status", "VmHWM:")
	if v == 0 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.Sys)
	}
	return v * 1024 // kB
}

// diskRead is read_bytes from /proc/self/io: bytes fetched from storage
// (page-cache hits do not count, which is what a disk-bound run wants).
func diskRead() int64 { return procField("/proc/self/io", "read_bytes:") }

func procField(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte(key)) {
			fs := bytes.Fields(line[len(key):])
			if len(fs) == 0 {
				return 0
			}
			v, _ := strconv.ParseInt(string(fs[0]), 10, 64)
			return v
		}
	}
	return 0
}

// String formats r for logs.
func (r Resources) String() string {
	return fmt.Sprintf("cpu %.0f%%, peak RSS %.1f MiB, disk read %.1f MiB",
		float64(r.CPUPercent), float64(r.PeakRSSBytes)/(1<<20), float64(r.DiskReadBytes)/(1<<20))
}
