package standard

import _ "github.com/berthdev/berth/providers/kubernetes" // kubernetes: one hardened pod per computer in a namespace
