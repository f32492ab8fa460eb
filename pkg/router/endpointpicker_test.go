package router

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/router/scrape"
	"github.com/berth-sh/berth/pkg/router/view"
)

func rankingRouter(t *testing.T, policy pick.Policy) *Router {
	p, err := pick.New(policy, pick.DefaultScorers, 1024)
	require.NoError(t, err)
	return &Router{picker: p, scraper: scrape.New(time.Second, http.DefaultClient), opts: Options{Policy: policy}}
}

var rankServer = &view.Server{Namespace: "ns", Name: "s", Endpoints: []*view.Endpoint{
	{Namespace: "ns", Pod: "a", Address: "10.0.0.1:8000"},
	{Namespace: "ns", Pod: "b", Address: "10.0.0.2:8000"},
	{Namespace: "ns", Pod: "c", Address: "10.0.0.3:8000"},
}}

func addrs(eps []*view.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Address
	}
	return out
}

// The endpoints named are distinct, the primary first, as many as asked and no more than
// there are; a subset hint (ip:port or a bare ip) leaves only its endpoints, and an empty
// one leaves none.
func TestRankEndpoints(t *testing.T) {
	for _, policy := range []pick.Policy{pick.Scored, pick.RoundRobin} {
		r := rankingRouter(t, policy)
		primaries := map[string]bool{}
		for range 6 {
			got := addrs(r.rankEndpoints(rankServer, &pick.Request{Model: "m"}, 3, nil))
			require.Len(t, got, 3, policy)
			assert.ElementsMatch(t, []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}, got, policy)
			primaries[got[0]] = true
		}
		if policy == pick.RoundRobin {
			assert.Len(t, primaries, 3, "round robin turns the primary over every endpoint")
		}
		assert.Len(t, r.rankEndpoints(rankServer, &pick.Request{}, 5, nil), 3, policy)
		assert.Len(t, r.rankEndpoints(rankServer, &pick.Request{}, 1, nil), 1, policy)
		assert.ElementsMatch(t, []string{"10.0.0.2:8000", "10.0.0.3:8000"},
			addrs(r.rankEndpoints(rankServer, &pick.Request{}, 3, []string{"10.0.0.2:8000", "10.0.0.3", "10.0.0.9:8000"})), policy)
		assert.Empty(t, r.rankEndpoints(rankServer, &pick.Request{}, 3, []string{}), policy)
		assert.Empty(t, r.rankEndpoints(rankServer, &pick.Request{}, 3, []string{"10.0.0.1:9999"}), "another port of the same pod is not the endpoint")
	}
}
