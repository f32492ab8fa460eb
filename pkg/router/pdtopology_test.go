package router

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/router/scrape"
	"github.com/berth-sh/berth/pkg/router/view"
)

// Two leaves, each with two NVLink domains of two nodes: n-<leaf><clique><i>.
func testFabric(t *testing.T) *fabric.Fabric {
	var nodes []*corev1.Node
	for _, leaf := range []string{"a", "b"} {
		for _, clique := range []string{"0", "1"} {
			for _, i := range []string{"0", "1"} {
				nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-" + leaf + clique + i, Labels: map[string]string{
					fabric.CliqueLabel: leaf + clique, "network.berth.sh/leaf": leaf}}})
			}
		}
	}
	f, problems := fabric.Build(nil, nodes, fabric.DefaultLabelTiers)
	assert.Empty(t, problems)
	return f
}

func decodeAt(node string, waiting, kv float64) pick.Candidate {
	return pick.Candidate{Endpoint: &view.Endpoint{Pod: "d-" + node, Node: node, Address: node + ":8000", Role: view.Decode},
		Stats: scrape.Stats{Metrics: scrape.Metrics{Waiting: waiting, KVUsage: kv}}}
}

func podNames(cs []pick.Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Endpoint.Pod)
	}
	return out
}

// The decode candidates narrow to the nearest tier that has a decode with room: the same
// node, then the NVLink domain, then the leaf, then the rest; a full near decode (queueing,
// or its KV cache past kvFull) gives way to a farther one with room; with none anywhere,
// or without a fabric, every candidate stays (the picker balances them by load).
func TestNearDecodes(t *testing.T) {
	f := testFabric(t)
	p := &view.Endpoint{Pod: "p", Node: "n-a00", Role: view.Prefill}
	sameNode, sameClique, sameLeaf, far := decodeAt("n-a00", 0, 0.1), decodeAt("n-a01", 0, 0.1), decodeAt("n-a10", 0, 0.1), decodeAt("n-b00", 0, 0.1)
	sameClique2 := decodeAt("n-a01", 0, 0.5)
	sameClique2.Endpoint.Pod, sameClique2.Endpoint.Address = "d-n-a01-2", "n-a01:8001"
	for _, c := range []struct {
		name  string
		cands []pick.Candidate
		want  []string
		tier  string
	}{
		{"same node first", []pick.Candidate{far, sameLeaf, sameClique, sameNode}, []string{"d-n-a00"}, "node"},
		{"then the NVLink domain, all of it for the picker", []pick.Candidate{far, sameClique, sameLeaf, sameClique2}, []string{"d-n-a01", "d-n-a01-2"}, "nvlink"},
		{"then the leaf", []pick.Candidate{far, sameLeaf}, []string{"d-n-a10"}, "leaf"},
		{"a queueing near decode gives way", []pick.Candidate{decodeAt("n-a01", 3, 0.2), sameLeaf, far}, []string{"d-n-a10"}, "leaf"},
		{"a full KV cache gives way", []pick.Candidate{decodeAt("n-a01", 0, 0.95), far}, []string{"d-n-b00"}, "far"},
		{"no room anywhere: all, by load", []pick.Candidate{decodeAt("n-a01", 2, 0.5), decodeAt("n-b00", 4, 0.5)}, []string{"d-n-a01", "d-n-b00"}, ""},
	} {
		got, d := nearDecodes(f, p, c.cands)
		assert.Equal(t, c.want, podNames(got), c.name)
		if c.tier != "" {
			assert.Equal(t, c.tier, tierLabel(f, p, got[0].Endpoint), c.name)
			if c.tier != "far" {
				assert.NotEqual(t, fabric.Far, d, c.name)
			}
		}
	}
	got, _ := nearDecodes(f, p, []pick.Candidate{decodeAt("n-a01", 1, 0.2), far})
	assert.Equal(t, []string{"d-n-a01"}, podNames(got), "one request in intake is not a queue")
	all := []pick.Candidate{far, sameClique}
	got, _ = nearDecodes(nil, p, all)
	assert.Equal(t, podNames(all), podNames(got), "no fabric: today's pairing")
	got, _ = nearDecodes(f, &view.Endpoint{Node: "elsewhere"}, all)
	assert.Equal(t, podNames(all), podNames(got), "a prefill on a node the fabric does not know: no preference")
	assert.Equal(t, "unknown", tierLabel(nil, p, far.Endpoint))
}
