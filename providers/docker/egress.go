package docker

// UsesSupervisorEgress implements providers.EgressUser: docker computers
// reach the supervisor's egress proxy and are given it.
func (d *Docker) UsesSupervisorEgress() bool { return true }
