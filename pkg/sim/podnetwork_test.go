package sim

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPodLoopback(t *testing.T) {
	assert.Equal(t, "127.3.7.9", PodLoopback("10.3.7.9"))
	assert.Equal(t, "127.3.7.9", PodLoopback("127.3.7.9"))
	assert.Equal(t, "::1", PodLoopback("::1"))
}

// A server listening on a pod's loopback address is reached by dialling the pod's address.
func TestDialPodNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.201.7.9:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.Write([]byte("pod"))
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	c, err := DialPodNetwork(context.Background(), "tcp", net.JoinHostPort("10.201.7.9", port))
	require.NoError(t, err)
	defer c.Close()
	buf := make([]byte, 3)
	_, err = c.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "pod", string(buf))
}
