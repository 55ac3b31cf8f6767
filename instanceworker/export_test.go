package instanceworker

import (
	"github.com/sluicehq/sluice/registry"
)

// NewWorker builds the handler alone, as New builds it for its Service
// (cfg's defaults applied, no crash points), for the tests that call it
// directly.
func NewWorker(cfg Config, d Deps, reg *registry.Registry) (*Worker, error) {
	return newWorker(cfg.withDefaults(), d, reg, nil)
}
