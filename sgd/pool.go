package sgd

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// pool runs the chunks of one job at a time on the calling goroutine and
// a fixed set of helper goroutines, started once and parked between jobs:
// no goroutine per batch, and nothing allocated per job.
//
// Chunks are handed out by an atomic counter, so a helper that another
// process keeps off its core delays nothing: the caller, which always
// works too, takes the chunks the helper would have taken, and waits only
// for chunks already started. Which goroutine runs a chunk never changes a
// result: a chunk writes its own outputs only, each in a fixed order.
//
// A pool's run is not safe for concurrent use (one job at a time); close
// stops the helpers.
type pool struct {
	mu      sync.Mutex
	wake    *sync.Cond // helpers wait here for the next job
	gen     uint32     // the job's number; 0 before the first
	chunks  int        // the job's chunk count
	fn      func(chunk int)
	closed  bool
	helpers int

	// next is gen<<32 | the next chunk to hand out: a helper that wakes
	// after its job has been replaced cannot take a chunk of the next one
	// with the old job's fn.
	next atomic.Uint64
	// done counts the chunks of the current job that have finished; the
	// goroutine that finishes the last one signals last, unless it is the
	// caller.
	done atomic.Int64
	last chan struct{}
}

// newPool starts helpers goroutines (none: run calls fn inline).
func newPool(helpers int) *pool {
	p := &pool{helpers: helpers, last: make(chan struct{}, 1)}
	p.wake = sync.NewCond(&p.mu)
	for range helpers {
		go p.help()
	}
	return p
}

// run calls fn(0), …, fn(chunks-1), each once, on the caller and the
// helpers, and returns when all have returned.
func (p *pool) run(chunks int, fn func(chunk int)) {
	if p.helpers == 0 || chunks <= 1 {
		for c := range chunks {
			fn(c)
		}
		return
	}
	p.mu.Lock()
	p.gen++
	gen := p.gen
	p.chunks, p.fn = chunks, fn
	p.done.Store(0)
	p.next.Store(uint64(gen) << 32)
	p.wake.Broadcast()
	p.mu.Unlock()
	if !p.work(gen, chunks, fn, true) {
		<-p.last // a helper finishes the last chunk and says so
	}
}

// work takes and runs chunks of job gen until none is left; it reports
// whether it finished the job's last chunk. A helper that does so wakes
// the caller.
func (p *pool) work(gen uint32, chunks int, fn func(int), caller bool) (finished bool) {
	for {
		v := p.next.Load()
		c := int(uint32(v))
		if uint32(v>>32) != gen || c >= chunks {
			return false
		}
		if !p.next.CompareAndSwap(v, v+1) {
			continue
		}
		fn(c)
		if p.done.Add(1) == int64(chunks) {
			if !caller {
				p.last <- struct{}{}
			}
			return true
		}
	}
}

// help is a helper goroutine: it waits for a job it has not seen, works on
// it, and waits again, until close.
func (p *pool) help() {
	seen := uint32(0)
	for {
		p.mu.Lock()
		for p.gen == seen && !p.closed {
			p.wake.Wait()
		}
		if p.closed {
			p.mu.Unlock()
			return
		}
		seen = p.gen
		chunks, fn := p.chunks, p.fn
		p.mu.Unlock()
		p.work(seen, chunks, fn, false) // nothing to do if the job is over
	}
}

// close stops the helpers once they finish what they are doing. run must
// not be called afterwards.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.wake.Broadcast()
	p.mu.Unlock()
}

// defaultThreads is the number of CPUs this process may use, as Go sees it
// (GOMAXPROCS follows the cgroup CPU limit since Go 1.25).
func defaultThreads() int { return runtime.GOMAXPROCS(0) }
