package standard

import _ "github.com/berthdev/berth/providers/browseruse" // browseruse: a hosted Browser Use cloud browser
