// Package standard imports the providers that ship with Berth, so that
// importing it registers them all.
package standard

import (
	_ "github.com/berthdev/berth/providers/docker" // docker: the supervisor's own Docker host
)
