package standard

import _ "github.com/berthdev/berth/providers/local" // local: someone else's machine, lent with berth agent run (not this host), through the relay and the lender's agent
