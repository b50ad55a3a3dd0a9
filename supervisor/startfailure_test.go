package supervisor

import (
	"net/http"
	"testing"
)

func TestStartFailureRoundTrip(t *testing.T) {
	for _, e := range []*Error{
		errorf(http.StatusServiceUnavailable, CodeUnavailable, "the provider is out of quota or capacity"),
		errorf(http.StatusUnprocessableEntity, "over_limit", "over the owner's limit: 2 computers at most"),
		errorf(http.StatusBadGateway, CodeProvider, ""),
	} {
		got, ok := parseStartFailure(startFailure(e))
		if !ok || *got != *e {
			t.Errorf("parseStartFailure(startFailure(%+v)) = %+v, %v", e, got, ok)
		}
	}
	for _, s := range []string{
		"", "destroy: provider unavailable", "start failed: ", "start failed: 200 ok: fine",
		"start failed: x provider_error: no status", "start failed: 503: no code",
	} {
		if e, ok := parseStartFailure(s); ok {
			t.Errorf("parseStartFailure(%q) = %+v, want none", s, e)
		}
	}
}
