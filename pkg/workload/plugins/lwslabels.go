package plugins

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
//
// A pod that also carries LWS's exclusive-topology annotation (Berth's LeaderWorkerSet
// take-over puts it on the pod templates of a LeaderWorkerSet that has it) gets the required
// pod affinity and anti-affinity LWS's pod webhook gives it: every pod of the group in one
// domain of that node label, and no pod of another group there. Kthena's plugin stops at
// the labels; Berth runs LeaderWorkerSets without LWS's webhook, so it applies them here.
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
	key := hex.EncodeToString(sum[:])
	p.Pod.Labels[leaderworkerset.GroupUniqueHashLabelKey] = key
	if topology := p.Pod.Annotations[leaderworkerset.ExclusiveKeyAnnotationKey]; topology != "" {
		exclusive(p.Pod, key, topology)
	}
	return nil
}

// exclusive confines the pod's group to one domain of topologyKey that no other group uses,
// with LWS's terms: affinity to the pods of its group-key, anti-affinity to pods of any other.
func exclusive(pod *corev1.Pod, groupKey, topologyKey string) {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	a := pod.Spec.Affinity
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{TopologyKey: topologyKey, LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: leaderworkerset.GroupUniqueHashLabelKey, Operator: metav1.LabelSelectorOpIn, Values: []string{groupKey}},
		}}})
	a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{TopologyKey: topologyKey, LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: leaderworkerset.GroupUniqueHashLabelKey, Operator: metav1.LabelSelectorOpExists},
			{Key: leaderworkerset.GroupUniqueHashLabelKey, Operator: metav1.LabelSelectorOpNotIn, Values: []string{groupKey}},
		}}})
}
