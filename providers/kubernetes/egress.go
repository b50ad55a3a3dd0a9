package kubernetes

// UsesSupervisorEgress implements providers.EgressUser: kubernetes computers
// reach the supervisor's egress proxy and are given it.
func (k *Kubernetes) UsesSupervisorEgress() bool { return true }
