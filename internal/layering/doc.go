// Package layering holds the test of the module's layering rule: which
// top-level rooms may import which (docs/architecture.md, "Layers").
package layering
