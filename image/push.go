package image

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// PushUpdate is the progress of one layer of a push.
type PushUpdate struct {
	Layer           string // short digest of the layer blob
	Complete, Total int64
	Done            bool
}

// Push sends the local image ref to the registry as dest (empty: ref),
// with the credentials and registry policy of a pull (the docker keychain,
// --insecure-registry, plain HTTP to loopback registries). Each layer goes
// first, with its progress sent to updates (nil: shown the store's way,
// WithProgress); then the manifest. It returns the manifest digest, which
// is the local one: the stored bytes are sent as they are.
func (s *Store) Push(ctx context.Context, ref, dest string, updates func(PushUpdate)) (string, error) {
	d, err := s.resolveLocal(ref)
	if err != nil {
		return "", err
	}
	if dest == "" {
		dest = d.Annotations[AnnotationRefName]
	}
	r, err := s.ParseReference(dest)
	if err != nil {
		return "", err
	}
	// The layout reader reads the manifest and config whole: their sizes
	// are checked first.
	if _, _, err := s.manifest(d.Digest.String()); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	p, err := layout.FromPath(s.path("oci"))
	if err != nil {
		return "", err
	}
	h, err := v1.NewHash(d.Digest.String())
	if err != nil {
		return "", err
	}
	img, err := p.Image(h)
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	show := updates
	var bars *pushBars
	if show == nil {
		bars = s.newPushBars()
		show = bars.update
	}
	opts := s.remoteOptions(ctx)
	for _, l := range layers {
		dg, err := l.Digest()
		if err != nil {
			return "", err
		}
		short := dg.Hex[:12]
		size, _ := l.Size()
		ch := make(chan v1.Update, 16)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range ch {
				show(PushUpdate{Layer: short, Complete: u.Complete, Total: u.Total})
			}
		}()
		err = remote.WriteLayer(r.Context(), l, append(opts, remote.WithProgress(ch))...)
		wg.Wait()
		if err != nil {
			bars.wait()
			return "", fmt.Errorf("push %s: layer %s: %w", dest, short, err)
		}
		show(PushUpdate{Layer: short, Complete: size, Total: size, Done: true})
	}
	bars.wait()
	if err := remote.Write(r, img, opts...); err != nil {
		return "", fmt.Errorf("push %s: %w", dest, err)
	}
	return d.Digest.String(), nil
}

// pushBars shows push progress as the store's Progress mode says: bars on
// a terminal, or a line per layer.
type pushBars struct {
	s     *Store
	p     *mpb.Progress
	mu    sync.Mutex
	bars  map[string]*mpb.Bar
	start map[string]time.Time
}

func (s *Store) newPushBars() *pushBars {
	b := &pushBars{s: s, bars: map[string]*mpb.Bar{}, start: map[string]time.Time{}}
	if s.progress == ProgressBars {
		b.p = mpb.New(mpb.WithOutput(os.Stderr), mpb.WithWidth(40), mpb.WithRefreshRate(100*time.Millisecond))
	}
	return b
}

func (b *pushBars) update(u PushUpdate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.s.progress {
	case ProgressBars:
		bar, ok := b.bars[u.Layer]
		if !ok {
			bar = b.p.AddBar(u.Total,
				mpb.PrependDecorators(decor.Name(u.Layer+" "), decor.CountersKibiByte("% .1f / % .1f")),
				mpb.AppendDecorators(decor.OnComplete(decor.Name("pushing"), "pushed")))
			b.bars[u.Layer] = bar
		}
		bar.SetCurrent(u.Complete)
		if u.Done && !bar.Completed() {
			bar.SetTotal(u.Total, true)
		}
	case ProgressPlain:
		if _, ok := b.start[u.Layer]; !ok {
			b.start[u.Layer] = time.Now()
			b.s.logf("layer %s: pushing %s", u.Layer, humanSize(u.Total))
		}
		if u.Done {
			b.s.logf("layer %s: pushed %s in %.2fs", u.Layer, humanSize(u.Total), time.Since(b.start[u.Layer]).Seconds())
		}
	}
}

func (b *pushBars) wait() {
	if b == nil || b.p == nil {
		return
	}
	b.mu.Lock()
	for _, bar := range b.bars {
		if !bar.Completed() {
			bar.Abort(false)
		}
	}
	b.mu.Unlock()
	b.p.Wait()
}
