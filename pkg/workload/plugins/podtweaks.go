package plugins

import (
	corev1 "k8s.io/api/core/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// PodTweaksName is Kthena's demo-pod-tweaks plugin: it sets a runtime class, adds
// annotations and appends environment variables to every container.
const PodTweaksName = "demo-pod-tweaks"

// PodTweaksConfig is demo-pod-tweaks' config, with Kthena's field names.
type PodTweaksConfig struct {
	RuntimeClassName string            `json:"runtimeClassName,omitempty"`
	Annotations      map[string]string `json:"annotations,omitempty"`
	Env              []corev1.EnvVar   `json:"env,omitempty"`
}

type podTweaks struct{ cfg PodTweaksConfig }

func newPodTweaks(spec workloadv1alpha1.PluginSpec) (Plugin, error) {
	var cfg PodTweaksConfig
	if err := decodeConfig(spec.Config, &cfg); err != nil {
		return nil, err
	}
	return &podTweaks{cfg: cfg}, nil
}

func (t *podTweaks) OnPodCreate(p *Pod) error {
	if t.cfg.RuntimeClassName != "" {
		name := t.cfg.RuntimeClassName
		p.Pod.Spec.RuntimeClassName = &name
	}
	if len(t.cfg.Annotations) > 0 && p.Pod.Annotations == nil {
		p.Pod.Annotations = map[string]string{}
	}
	for k, v := range t.cfg.Annotations {
		p.Pod.Annotations[k] = v
	}
	for i := range p.Pod.Spec.Containers {
		p.Pod.Spec.Containers[i].Env = append(p.Pod.Spec.Containers[i].Env, t.cfg.Env...)
	}
	for i := range p.Pod.Spec.InitContainers {
		p.Pod.Spec.InitContainers[i].Env = append(p.Pod.Spec.InitContainers[i].Env, t.cfg.Env...)
	}
	return nil
}
