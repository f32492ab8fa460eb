package sim

import (
	"context"
	"net"
)

// The simulated pod network: a pod of a Kubelet with PodNetwork set has an address such as
// 10.3.7.9 that EndpointSlices accept, while its servers listen on this machine, on the
// loopback address with the same last three octets (127.3.7.9). Clients inside the
// simulated cluster (berth-router, through router.Options.DialEndpoint) dial pod addresses
// with DialPodNetwork, which connects to that loopback address instead.

// PodLoopback is the loopback address where the servers of the pod with address ip listen
// (ip itself when it is loopback already or not IPv4).
func PodLoopback(ip string) string {
	v4 := net.ParseIP(ip).To4()
	if v4 == nil || v4[0] == 127 {
		return ip
	}
	return net.IPv4(127, v4[1], v4[2], v4[3]).String()
}

// DialPodNetwork connects to addr ("ip:port") as a pod of the simulated network sees it:
// at the pod's loopback address (PodLoopback). Names and other addresses are dialled as
// they are.
func DialPodNetwork(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if host, port, err := net.SplitHostPort(addr); err == nil {
		addr = net.JoinHostPort(PodLoopback(host), port)
	}
	return d.DialContext(ctx, network, addr)
}
