package standard

import (
	_ "github.com/berthdev/berth/providers/novita" // novita: Novita Agent Sandbox, E2B-compatible
)
