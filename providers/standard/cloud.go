package standard

import (
	_ "github.com/berthdev/berth/providers/cloud" // cloud: another Berth supervisor
)
