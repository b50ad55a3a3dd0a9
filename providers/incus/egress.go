package incus

// UsesSupervisorEgress implements providers.EgressUser: incus computers
// reach the supervisor's egress proxy and are given it.
func (p *Incus) UsesSupervisorEgress() bool { return true }
