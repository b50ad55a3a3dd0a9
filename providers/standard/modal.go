package standard

import (
	_ "github.com/berthdev/berth/providers/modal" // modal: Modal sandboxes
)
