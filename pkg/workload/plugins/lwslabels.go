package plugins

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"

	leaderworkerset "sigs.k8s.io/lws/api/leaderworkerset/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// LWSLabelsName is Kthena's lws-standard-labels plugin: on the pods of a ModelServing a
// LeaderWorkerSet owns (Kthena turns LeaderWorkerSets into ModelServings), the labels
// LeaderWorkerSet's own controller puts on its pods, so tools that select them keep working.
const LWSLabelsName = "lws-standard-labels"

type lwsLabels struct{}

func newLWSLabels(spec workloadv1alpha1.PluginSpec) (Plugin, error) {
	if err := decodeConfig(spec.Config, &struct{}{}); err != nil {
		return nil, fmt.Errorf("%s takes no config: %w", LWSLabelsName, err)
	}
	return lwsLabels{}, nil
}

// OnPodCreate adds leaderworkerset.sigs.k8s.io/{name,group-index,worker-index,group-key}
// when a LeaderWorkerSet owns the ModelServing, and does nothing otherwise, as Kthena's.
// group-key is the SHA-1 of "<lws>-<group index>", LeaderWorkerSet's own group hash.
func (lwsLabels) OnPodCreate(p *Pod) error {
	lws := ""
	for _, ref := range p.ModelServing.OwnerReferences {
		if ref.Kind == "LeaderWorkerSet" && ref.Name != "" {
			lws = ref.Name
			break
		}
	}
	if lws == "" {
		return nil
	}
	if p.Pod.Labels == nil {
		p.Pod.Labels = map[string]string{}
	}
	sum := sha1.Sum([]byte(fmt.Sprintf("%s-%d", lws, p.Group)))
	p.Pod.Labels[leaderworkerset.SetNameLabelKey] = lws
	p.Pod.Labels[leaderworkerset.GroupIndexLabelKey] = strconv.Itoa(p.Group)
	p.Pod.Labels[leaderworkerset.WorkerIndexLabelKey] = strconv.Itoa(p.Worker)
	p.Pod.Labels[leaderworkerset.GroupUniqueHashLabelKey] = hex.EncodeToString(sum[:])
	return nil
}
