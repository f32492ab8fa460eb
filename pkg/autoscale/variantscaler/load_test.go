package variantscaler

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// Tokens per request are read over the requests that finished in the interval, not from
// the token counters, which also count the tokens of requests still running: with long
// requests generating beside short ones that finish, the counters' ratio reads far more
// than the short requests' length (and, the other way round, 54 was once read for
// requests of 100).
func TestLoadReadsTokensPerFinishedRequest(t *testing.T) {
	eng := engine.New(engine.Config{Model: "m", TimeScale: 0.2})
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = eng.Close() })
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	pods := []podmetrics.Pod{{UID: "u1", Name: "engine-0", IP: host, Ready: true}}
	ep := podmetrics.Endpoint{Port: int32(p), Path: "/metrics"}
	r := podmetrics.NewReader(5 * time.Second)
	ctx := context.Background()

	_, err = readLoad(ctx, r, pods, ep, time.Now())
	require.Error(t, err, "the first read has no rate")

	// Long requests keep generating through the interval and past its end.
	long, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 0; i < 4; i++ {
		go func() { _ = engine.Complete(long, srv.URL, fmt.Sprintf("long %d", i), 2000) }()
	}
	for i := 0; i < 6; i++ {
		require.NoError(t, engine.Complete(ctx, srv.URL, fmt.Sprintf("short %d", i), 20))
	}
	time.Sleep(1100 * time.Millisecond) // the reader's minimum interval
	l, err := readLoad(ctx, r, pods, ep, time.Now())
	require.NoError(t, err)
	t.Logf("load: %+v", l)
	require.InDelta(t, 20, l.AvgOutput, 0.01, "output tokens per finished request")
	require.Positive(t, l.AvgInput)
	require.Positive(t, l.RatePerMinute)
}
