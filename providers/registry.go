package providers

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// Factory builds a provider from its settings.
type Factory func(Config) (Provider, error)

var (
	mu        sync.Mutex
	factories = map[string]Factory{}
)

// Register adds a provider under id. It panics on an empty or duplicate id,
// so a mistake shows at start and not at the first computer.
func Register(id string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if id == "" {
		panic("providers: Register with empty id")
	}
	if f == nil {
		panic("providers: Register " + id + " with nil factory")
	}
	if _, dup := factories[id]; dup {
		panic("providers: Register called twice for " + id)
	}
	factories[id] = f
}

// Lookup returns the factory registered under id.
func Lookup(id string) (Factory, bool) {
	mu.Lock()
	defer mu.Unlock()
	f, ok := factories[id]
	return f, ok
}

// IDs returns the registered provider ids, sorted.
func IDs() []string {
	mu.Lock()
	defer mu.Unlock()
	ids := make([]string, 0, len(factories))
	for id := range factories {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// New builds the provider registered under id.
func New(id string, cfg Config) (Provider, error) {
	f, ok := Lookup(id)
	if !ok {
		return nil, fmt.Errorf("%w: %q (known: %v)", ErrUnknown, id, IDs())
	}
	p, err := f(cfg)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", id, err)
	}
	return p, nil
}

var describers = map[string]Describer{}

// Describe records d as the describer of the provider registered under id;
// providers call it from init beside Register, usually with a nil pointer
// of their type.
func Describe(id string, d Describer) {
	mu.Lock()
	defer mu.Unlock()
	describers[id] = d
}

// DescriptionOf returns the description of the provider id, if it has one.
func DescriptionOf(id string) (Description, bool) {
	mu.Lock()
	d, ok := describers[id]
	mu.Unlock()
	if !ok {
		return Description{}, false
	}
	return d.Describe(), true
}

// Probe asks the provider id what it finds in its backend with cfg's
// settings (see Prober); ok is false when the provider cannot probe.
func Probe(ctx context.Context, id string, cfg Config) (facts []Fact, ok bool) {
	mu.Lock()
	d := describers[id]
	mu.Unlock()
	p, ok := d.(Prober)
	if !ok {
		return nil, false
	}
	return p.Probe(ctx, cfg), true
}
