package backend

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

var (
	registryMu sync.RWMutex
	registry   = map[string]func() (Backend, error){}
)

// Register makes a backend available to Open under name. Implementations
// call it from init. Registering a name twice panics, as that is a
// programming error.
func Register(name string, f func() (Backend, error)) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if f == nil {
		panic("backend: Register " + name + " with a nil factory")
	}
	if _, dup := registry[name]; dup {
		panic("backend: Register called twice for " + name)
	}
	registry[name] = f
}

// Open returns a new instance of the backend registered as name. The
// implementation's package must be linked in (usually by a blank import).
func Open(name string) (Backend, error) {
	registryMu.RLock()
	f, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown backend %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	b, err := f()
	if err != nil {
		return nil, fmt.Errorf("open backend %s: %w", name, err)
	}
	return b, nil
}

// Names lists the registered backends, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
