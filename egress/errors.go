package egress

import "errors"

var (
	// ErrConfig is returned by New when a required part of Config is
	// missing or a value is out of range.
	ErrConfig = errors.New("egress: invalid config")

	// ErrBlockedCIDRs is returned by ParseBlockedCIDRs for an entry that is
	// neither a CIDR range nor an address.
	ErrBlockedCIDRs = errors.New("EGRESS_BLOCKED_CIDRS: invalid entry")
)
