package standard

import (
	_ "github.com/berthdev/berth/providers/daytona" // daytona: Daytona sandboxes
)
