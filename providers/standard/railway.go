package standard

import _ "github.com/berthdev/berth/providers/railway" // railway: one Railway service per computer, reached through its domain
