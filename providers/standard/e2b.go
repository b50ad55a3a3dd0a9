package standard

import (
	_ "github.com/berthdev/berth/providers/e2b" // e2b: E2B sandboxes
)
