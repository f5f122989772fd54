package image

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Progress selects how a pull reports what it is doing.
type Progress int

const (
	ProgressNone  Progress = iota
	ProgressPlain          // one log line per layer start and finish
	ProgressBars           // per-layer bars on a terminal
)

// reporter receives per-layer progress.
type reporter interface {
	track(layer string, size int64, r io.Reader) io.Reader
	done(layer string, size int64, cached bool)
	wait()
}

// newReporter reports layers fetched from a registry, or with local set,
// read from a file (load): then nothing is "downloaded".
func newReporter(p Progress, logf func(string, ...any), local bool) reporter {
	switch p {
	case ProgressBars:
		return &barReporter{p: mpb.New(mpb.WithOutput(os.Stderr), mpb.WithWidth(40), mpb.WithRefreshRate(100*time.Millisecond)), bars: map[string]*mpb.Bar{}}
	case ProgressPlain:
		verbs := [2]string{"downloading", "downloaded and extracted"}
		if local {
			verbs = [2]string{"loading", "loaded and extracted"}
		}
		return &plainReporter{logf: logf, start: map[string]time.Time{}, verbs: verbs}
	}
	return nopReporter{}
}

type nopReporter struct{}

func (nopReporter) track(_ string, _ int64, r io.Reader) io.Reader { return r }
func (nopReporter) done(string, int64, bool)                       {}
func (nopReporter) wait()                                          {}

type plainReporter struct {
	logf  func(string, ...any)
	mu    sync.Mutex
	start map[string]time.Time
	verbs [2]string // while, after
}

func (p *plainReporter) track(layer string, size int64, r io.Reader) io.Reader {
	p.mu.Lock()
	p.start[layer] = time.Now()
	p.mu.Unlock()
	p.logf("layer %s: %s %s", layer, p.verbs[0], humanSize(size))
	return r
}

func (p *plainReporter) done(layer string, size int64, cached bool) {
	if cached {
		p.logf("layer %s: already present", layer)
		return
	}
	p.mu.Lock()
	d := time.Since(p.start[layer])
	p.mu.Unlock()
	p.logf("layer %s: %s %s in %.2fs", layer, p.verbs[1], humanSize(size), d.Seconds())
}

func (*plainReporter) wait() {}

type barReporter struct {
	p    *mpb.Progress
	mu   sync.Mutex
	bars map[string]*mpb.Bar
}

func (b *barReporter) bar(layer string, size int64) *mpb.Bar {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bar, ok := b.bars[layer]; ok {
		return bar
	}
	bar := b.p.AddBar(size,
		mpb.PrependDecorators(decor.Name(layer+" "), decor.CountersKibiByte("% .1f / % .1f")),
		mpb.AppendDecorators(decor.OnComplete(decor.AverageSpeed(decor.SizeB1024(0), "% .1f"), "done")))
	b.bars[layer] = bar
	return bar
}

func (b *barReporter) track(layer string, size int64, r io.Reader) io.Reader {
	return b.bar(layer, size).ProxyReader(r)
}

func (b *barReporter) done(layer string, size int64, cached bool) {
	bar := b.bar(layer, size)
	bar.SetCurrent(size)
	if !bar.Completed() {
		bar.SetTotal(size, true)
	}
}

func (b *barReporter) wait() {
	b.mu.Lock()
	for _, bar := range b.bars {
		if !bar.Completed() {
			bar.Abort(false)
		}
	}
	b.mu.Unlock()
	b.p.Wait()
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
