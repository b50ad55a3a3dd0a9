package standard

import _ "github.com/berthdev/berth/providers/browserbase" // browserbase: a hosted browser session kept alive for the lease
