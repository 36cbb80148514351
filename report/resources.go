package report

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Sampler measures the resources of the current process: CPU time from
// getrusage, memory and disk figures from /proc (zero on systems without
// it; peak memory falls back to Go's runtime figures).
type Sampler struct {
	start    time.Time
	startCPU time.Duration
	// The memory and disk figures of Frequent, and when they were read.
	procAt        time.Time
	peakRSS, disk int64
}

// procEvery is how old Frequent's memory and disk figures may be.
const procEvery = time.Second

// NewSampler starts measuring now.
func NewSampler() *Sampler {
	s := &Sampler{start: time.Now()}
	s.startCPU = processCPU() // after the wall clock: the CPU window lies within the wall window
	return s
}

// minCPUWindow is the shortest time over which Sample reports CPU use.
// The kernel brings a thread's runtime up to date when it is read, but the
// runtime of the process's other threads only at their next tick or
// context switch, so a reading can lag by a tick (4ms at HZ=250) per
// running thread: over 2ms that read as 0% or over 200% on 2 cores. Over
// 100ms the error is a few percent of a core.
const minCPUWindow = 100 * time.Millisecond

// Sample returns the resources used since NewSampler. CPUPercent is the
// mean over that time; NaN (null in a report) when the time is shorter
// than minCPUWindow, too short to measure.
func (s *Sampler) Sample() Resources {
	s.procAt, s.peakRSS, s.disk = time.Now(), peakRSS(), diskRead()
	return Resources{CPUPercent: s.cpuPercent(), PeakRSSBytes: s.peakRSS, DiskReadBytes: s.disk}
}

// cpuPercent is the mean CPU use since NewSampler, NaN over less than
// minCPUWindow.
func (s *Sampler) cpuPercent() Num {
	cpu := processCPU() - s.startCPU
	wall := time.Since(s.start)
	if wall < minCPUWindow {
		return Num(math.NaN())
	}
	return Num(100 * cpu.Seconds() / wall.Seconds())
}

// Frequent is Sample for callers that sample often (every training round):
// the CPU figure is current, the memory and disk figures are at most
// procEvery old. Reading them opens two /proc files; on every round that
// cost a capped peer 6% of its CPU (pprof of a 4-peer cluster at 0.4 core
// per peer, batch 1000).
func (s *Sampler) Frequent() Resources {
	if time.Since(s.procAt) >= procEvery {
		return s.Sample()
	}
	return Resources{CPUPercent: s.cpuPercent(), PeakRSSBytes: s.peakRSS, DiskReadBytes: s.disk}
}

// processCPU is the user+system CPU time of the process, all threads, in
// microseconds (getrusage(RUSAGE_SELF)). It used to come from
// /proc/self/stat, whose utime and stime are in clock ticks of 10ms: a
// short window then measured 0 or several ticks, which read as 0% or, on
// a 2-core machine, 600%. getrusage's sum is the scheduler's runtime.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	cpu := "-"
	if c := float64(r.CPUPercent); !math.IsNaN(c) {
		cpu = fmt.Sprintf("%.0f%%", c)
	}
	return fmt.Sprintf("cpu %s, peak RSS %.1f MiB, disk read %.1f MiB",
		cpu, float64(r.PeakRSSBytes)/(1<<20), float64(r.DiskReadBytes)/(1<<20))
}
