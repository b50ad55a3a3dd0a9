// Package standard imports the providers that ship with Berth, so that
// importing it registers them all.
package standard

import (
	_ "github.com/berthdev/berth/providers/docker" // docker: the supervisor's own Docker host
	_ "github.com/berthdev/berth/providers/tunnel" // tunnel: a computer served by `berth agent tunnel`, reached by URL
)
