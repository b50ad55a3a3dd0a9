package providers

// EgressUser is implemented by providers whose computers reach the
// supervisor's egress proxy (docker; kubernetes and incus, whose operator
// runs the proxy where their computers reach it). Only their computers are
// given the proxy's address and their own credentials. Every other
// provider's computers get none: a lender runs its own proxy, another
// supervisor its own, and a hosted provider's computers use its network.
type EgressUser interface {
	UsesSupervisorEgress() bool
}

// UsesSupervisorEgress reports whether p's computers are given the
// supervisor's egress proxy.
func UsesSupervisorEgress(p Provider) bool {
	e, ok := p.(EgressUser)
	return ok && e.UsesSupervisorEgress()
}
