package standard

import _ "github.com/berthdev/berth/providers/local" // local: a lender's machine, through the relay and the lender's agent
