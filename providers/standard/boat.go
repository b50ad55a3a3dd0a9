package standard

import _ "github.com/berthdev/berth/providers/boat" // boat: one Boat VM per computer, running the image with Docker
