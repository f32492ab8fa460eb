// Package plugins is Kthena 1.0's ModelServing plugin chain (spec.plugins): built-in
// plugins, chosen by name, that change every pod the ModelServing controller creates before
// it is created, in list order. It ships Kthena's built-ins, lws-standard-labels and
// demo-pod-tweaks, with Kthena's names, scopes and config fields.
package plugins

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Pod is what a plugin is told about a pod the controller is about to create.
type Pod struct {
	ModelServing *workloadv1alpha1.ModelServing
	// Group is the ServingGroup's index; Role and RoleID name the role and its replica.
	Group        int
	Role, RoleID string
	// Worker is the pod's worker index: 0 for the entry pod.
	Worker int
	// Pod is changed in place.
	Pod *corev1.Pod
}

// Plugin changes a pod before it is created. Kthena's plugins also have an OnPodReady hook;
// its built-ins do nothing there, so Berth's have only this one.
type Plugin interface {
	OnPodCreate(p *Pod) error
}

// Factory builds a plugin from its spec (its config read strictly), or says what is wrong.
type Factory func(spec workloadv1alpha1.PluginSpec) (Plugin, error)

// builtIns are the plugins Kthena 1.0 ships, by their registered names.
var builtIns = map[string]Factory{
	LWSLabelsName: newLWSLabels,
	PodTweaksName: newPodTweaks,
}

// Names lists the built-in plugins, sorted.
func Names() []string {
	var out []string
	for n := range builtIns {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Error says which plugin of spec.plugins cannot be used and why.
type Error struct {
	Index  int
	Name   string
	Reason string // UnknownPlugin or InvalidPluginConfig
	Err    error
}

// Reasons of an Error (and of the PluginsAccepted condition and its event).
const (
	ReasonUnknownPlugin       = "UnknownPlugin"
	ReasonInvalidPluginConfig = "InvalidPluginConfig"
)

func (e *Error) Error() string {
	return fmt.Sprintf("spec.plugins[%d] %q: %v", e.Index, e.Name, e.Err)
}

// Chain is a ModelServing's plugins, built from spec.plugins, in order.
type Chain struct {
	entries []entry
}

type entry struct {
	spec   workloadv1alpha1.PluginSpec
	plugin Plugin
}

// NewChain builds the chain of spec.plugins; the first plugin that is not a built-in, or
// whose config does not read, is the error.
func NewChain(specs []workloadv1alpha1.PluginSpec) (*Chain, error) {
	c := &Chain{}
	for i, spec := range specs {
		if spec.Type != "" && spec.Type != workloadv1alpha1.PluginTypeBuiltIn {
			return nil, &Error{Index: i, Name: spec.Name, Reason: ReasonUnknownPlugin, Err: fmt.Errorf("type %s is not supported: only BuiltIn", spec.Type)}
		}
		factory, ok := builtIns[spec.Name]
		if !ok {
			return nil, &Error{Index: i, Name: spec.Name, Reason: ReasonUnknownPlugin,
				Err: fmt.Errorf("no built-in plugin of this name (built-in: %s)", strings.Join(Names(), ", "))}
		}
		p, err := factory(spec)
		if err != nil {
			return nil, &Error{Index: i, Name: spec.Name, Reason: ReasonInvalidPluginConfig, Err: fmt.Errorf("config: %w", err)}
		}
		c.entries = append(c.entries, entry{spec: spec, plugin: p})
	}
	return c, nil
}

// OnPodCreate runs every plugin whose scope covers the pod, in order; each sees the pod as
// the previous ones left it.
func (c *Chain) OnPodCreate(p *Pod) error {
	if c == nil {
		return nil
	}
	for _, e := range c.entries {
		if !inScope(e.spec.Scope, p) {
			continue
		}
		if err := e.plugin.OnPodCreate(p); err != nil {
			return fmt.Errorf("plugin %s on pod %s: %w", e.spec.Name, p.Pod.Name, err)
		}
	}
	return nil
}

// inScope is Kthena's scope rule: roles is an allow-list (empty: every role); target Entry,
// Worker or All (empty: all).
func inScope(s *workloadv1alpha1.PluginScope, p *Pod) bool {
	if s == nil {
		return true
	}
	if len(s.Roles) > 0 && !slices.Contains(s.Roles, p.Role) {
		return false
	}
	switch s.Target {
	case "", workloadv1alpha1.PluginTargetAll:
		return true
	case workloadv1alpha1.PluginTargetEntry:
		return p.Worker == 0
	case workloadv1alpha1.PluginTargetWorker:
		return p.Worker > 0
	}
	return false
}

// decodeConfig reads a plugin's config into out, refusing fields out does not have: a
// misspelt key would otherwise be ignored without a word.
func decodeConfig(cfg *apiextensionsv1.JSON, out any) error {
	if cfg == nil || len(cfg.Raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(cfg.Raw))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}
