package standard

import _ "github.com/berthdev/berth/providers/incus" // incus: one container per computer from an OCI registry, over the Incus REST API
