package gateway

import (
	"testing"

	"github.com/stretchr/testify/assert"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// status.addresses: the configured addresses typed as IPs or hostnames; without any, the
// listeners' own IP, and nothing for every interface (no single address reaches them).
func TestStatusAddresses(t *testing.T) {
	typ := func(a []gwv1.GatewayStatusAddress) (out []string) {
		for _, x := range a {
			out = append(out, string(*x.Type)+"="+x.Value)
		}
		return out
	}
	assert.Equal(t, []string{"IPAddress=10.0.0.7", "Hostname=gw.example.com"},
		typ(StatusAddresses([]string{"10.0.0.7", "gw.example.com"}, "127.0.0.5")))
	assert.Equal(t, []string{"IPAddress=127.0.0.5"}, typ(StatusAddresses(nil, "127.0.0.5")))
	assert.Empty(t, StatusAddresses(nil, ""))
	assert.Empty(t, StatusAddresses(nil, "0.0.0.0"))
}
