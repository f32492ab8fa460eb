package modelbooster

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Validate finds what the CRD schema cannot reject but the translation needs, with
// the path of each offending field. Every error is collected, not just the first.
func Validate(mb *workloadv1alpha1.ModelBooster) field.ErrorList {
	var errs field.ErrorList
	backends := field.NewPath("spec", "backends")
	errs = append(errs, validateShape(mb)...)
	if len(mb.Spec.Backends) > maxRouteTargets {
		errs = append(errs, field.TooMany(backends, len(mb.Spec.Backends), maxRouteTargets))
	}
	served := ServedModelName(mb)
	names := map[string]bool{}
	adapterURL := map[string]string{} // adapter name -> artifactURL, across backends
	adapterWhere := map[string]string{}
	for i, b := range Backends(mb) {
		p := BackendPath(mb, i)
		if names[b.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), b.Name))
		}
		names[b.Name] = true
		errs = append(errs, validateBackendName(mb, b, p)...)
		eng, ok := boosterEngines[b.Type]
		if !ok {
			errs = append(errs, field.NotSupported(p.Child("type"), b.Type, supportedBackendTypes()))
			continue
		}
		if b.ModelURI == "" {
			errs = append(errs, field.Required(p.Child("modelURI"), "the engine needs a model to serve (hf://, ms://, s3:// or pvc://)"))
		} else if !hasAnyPrefix(b.ModelURI, "hf://", "ms://", "s3://", "pvc://") || len(uriPath(b.ModelURI)) == 0 {
			errs = append(errs, field.Invalid(p.Child("modelURI"), b.ModelURI, "must be hf://<repo>, ms://<repo>, s3://<bucket>/<path> or pvc://<claim>[/<path>]"))
		}
		if b.CacheURI != "" && (!hasAnyPrefix(b.CacheURI, "hostpath://", "pvc://") || strings.Trim(uriPath(b.CacheURI), "/") == "") {
			errs = append(errs, field.Invalid(p.Child("cacheURI"), b.CacheURI, "must be hostpath://<path> or pvc://<claim>[/<path>]"))
		}
		errs = append(errs, validateWorkers(b, eng, p)...)
		errs = append(errs, validateServedNames(b, p, served)...)
		seen := map[string]bool{}
		for j, a := range b.LoraAdapters {
			ap := p.Child("loraAdapters").Index(j)
			if seen[a.Name] {
				errs = append(errs, field.Duplicate(ap.Child("name"), a.Name))
			}
			seen[a.Name] = true
			if a.Name == served {
				errs = append(errs, field.Invalid(ap.Child("name"), a.Name, "an adapter cannot have the served model's name"))
			}
			if url, ok := adapterURL[a.Name]; ok && url != a.ArtifactURL {
				errs = append(errs, field.Invalid(ap.Child("artifactURL"), a.ArtifactURL,
					fmt.Sprintf("adapter %q is %s in backend %s: one name must mean one adapter, since the route sends it to every backend that has it", a.Name, url, adapterWhere[a.Name])))
			} else if !ok {
				adapterURL[a.Name], adapterWhere[a.Name] = a.ArtifactURL, b.Name
			}
		}
	}
	if len(adapterURL) > maxRouteAdapters {
		errs = append(errs, field.TooMany(backends.Child("loraAdapters"), len(adapterURL), maxRouteAdapters))
	}
	return errs
}

// validateShape repeats the CRD's CEL rules on the two shapes (so a ModelBooster stored
// under an older CRD is reported, not half-compiled): exactly one of spec.backends and
// spec.backend; a backend's fixed replicas beside none of the autoscaling fields; the
// single backend with replicas and without the model's autoscaling.
func validateShape(mb *workloadv1alpha1.ModelBooster) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	switch {
	case mb.Spec.Backend != nil && mb.Spec.Backends != nil:
		errs = append(errs, field.Forbidden(spec.Child("backend"), "spec.backend and spec.backends are mutually exclusive: set one"))
	case mb.Spec.Backend == nil && len(mb.Spec.Backends) == 0:
		errs = append(errs, field.Required(spec.Child("backends"), "set spec.backends (a list of backends) or spec.backend (one backend with fixed replicas)"))
	}
	if b := mb.Spec.Backend; b != nil {
		if b.Replicas == nil {
			errs = append(errs, field.Required(spec.Child("backend", "replicas"), "the single backend runs a fixed number of replicas"))
		}
		if mb.Spec.AutoscalingPolicy != nil {
			errs = append(errs, field.Forbidden(spec.Child("autoscalingPolicy"), "scales spec.backends; spec.backend has fixed replicas"))
		}
		if mb.Spec.CostExpansionRatePercent != nil {
			errs = append(errs, field.Forbidden(spec.Child("costExpansionRatePercent"), "applies to autoscaled spec.backends; spec.backend has fixed replicas"))
		}
	}
	errs = append(errs, embeddedPolicyTargets(mb.Spec.AutoscalingPolicy, spec.Child("autoscalingPolicy"))...)
	for i, b := range Backends(mb) {
		errs = append(errs, embeddedPolicyTargets(b.AutoscalingPolicy, BackendPath(mb, i).Child("autoscalingPolicy"))...)
	}
	for i, b := range Backends(mb) {
		if b.Replicas == nil {
			continue
		}
		p := BackendPath(mb, i)
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"minReplicas", b.MinReplicas != 0}, {"maxReplicas", b.MaxReplicas != 0}, {"scalingCost", b.ScalingCost != 0},
			{"scaleToZeroGracePeriod", b.ScaleToZeroGracePeriod != nil}, {"autoscalingPolicy", b.AutoscalingPolicy != nil},
		} {
			if f.set {
				errs = append(errs, field.Forbidden(p.Child(f.name), "replicas fixes the backend's size; this field sizes an autoscaled backend"))
			}
		}
	}
	return errs
}

// embeddedPolicyTargets refuses a Kthena 1.0 target inside a ModelBooster's policy, as the
// CRD does: the booster binds the policy to the ModelServings it generates, so a target of
// the policy's own would be a second, conflicting answer to "what does this scale" (and
// the AutoscalingPolicyBinding it is copied beside refuses it).
func embeddedPolicyTargets(p *workloadv1alpha1.AutoscalingPolicySpec, path *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	for _, t := range []struct {
		name string
		set  bool
	}{{"homogeneousTarget", p.HomogeneousTarget != nil}, {"heterogeneousTarget", p.HeterogeneousTarget != nil}, {"disaggregatedTarget", p.DisaggregatedTarget != nil}} {
		if t.set {
			errs = append(errs, field.Forbidden(path.Child(t.name),
				"an AutoscalingPolicy embedded in a ModelBooster scales the ModelServings the booster generates, so it names no target of its own (size the backends with minReplicas and maxReplicas)"))
		}
	}
	return errs
}

func supportedBackendTypes() []string {
	out := make([]string, 0, len(boosterEngines))
	for t := range boosterEngines {
		out = append(out, string(t))
	}
	sort.Strings(out)
	return out
}

// validateBackendName checks that the names derived from the backend fit where they go:
// the ModelServing name is the value of its pods' modelserving.volcano.sh/name label, and
// "<name>-<group>" the value of their group-name label (63 characters at most each).
func validateBackendName(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend, p *field.Path) field.ErrorList {
	groups := max(b.MaxReplicas, b.MinReplicas, ptr.Deref(b.Replicas, 0), 1)
	longest := workloadv1alpha1.ServingGroupName(ObjectName(mb.Name, b.Name), int(groups-1))
	if msgs := validation.IsValidLabelValue(longest); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p.Child("name"), b.Name,
			fmt.Sprintf("ServingGroup name %q (ModelBooster name, backend name and group index) is not a valid label value: %s", longest, strings.Join(msgs, "; ")))}
	}
	return nil
}

// validateWorkers checks that the backend's workers are the roles its type runs: one
// server for an aggregated engine; one prefill and one decode (plus at most one controller
// and one coordinator) for a disaggregated one.
func validateWorkers(b *workloadv1alpha1.ModelBackend, eng boosterEngine, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	wp := p.Child("workers")
	allowed := []workloadv1alpha1.ModelWorkerType{workloadv1alpha1.ModelWorkerTypeServer}
	required := allowed
	if eng.disaggregated {
		required = []workloadv1alpha1.ModelWorkerType{workloadv1alpha1.ModelWorkerTypePrefill, workloadv1alpha1.ModelWorkerTypeDecode}
		allowed = append(slices.Clone(required), workloadv1alpha1.ModelWorkerTypeController, workloadv1alpha1.ModelWorkerTypeCoordinator)
	}
	seen := map[workloadv1alpha1.ModelWorkerType]bool{}
	for j := range b.Workers {
		w := &b.Workers[j]
		t := workerType(w)
		if !slices.Contains(allowed, t) {
			errs = append(errs, field.NotSupported(wp.Index(j).Child("type"), t, workerTypeStrings(allowed)))
			continue
		}
		if seen[t] {
			errs = append(errs, field.Duplicate(wp.Index(j).Child("type"), t))
		}
		seen[t] = true
		if _, err := configArgs(w.Config); err != nil {
			errs = append(errs, field.Invalid(wp.Index(j).Child("config"), string(w.Config.Raw), err.Error()))
		} else {
			for _, key := range reservedConfigKeys(b, t) {
				if hasConfigKey(w.Config, key) {
					errs = append(errs, field.Forbidden(wp.Index(j).Child("config").Key(key), "set by the ModelBooster controller (from modelURI, cacheURI and the backend type)"))
				}
			}
		}
	}
	for _, t := range required {
		if !seen[t] {
			errs = append(errs, field.Required(wp, fmt.Sprintf("a %s backend needs a worker of type %s", b.Type, t)))
		}
	}
	return errs
}

// validateServedNames checks the config served-model-name of the backend's serving
// workers: a non-empty string, the same in every worker that sets it (one ModelRoute
// sends one model name to every backend, and a prefill engine must serve the decode's).
func validateServedNames(b *workloadv1alpha1.ModelBackend, p *field.Path, served string) field.ErrorList {
	var errs field.ErrorList
	for j := range b.Workers {
		w := &b.Workers[j]
		key, v, ok := configValue(w.Config, servedModelNameKey)
		if !ok {
			continue
		}
		fp := p.Child("workers").Index(j).Child("config").Key(key)
		s, isString := v.(string)
		switch {
		case !servesModel(workerType(w)):
			errs = append(errs, field.Forbidden(fp, fmt.Sprintf("a %s worker serves no model", workerType(w))))
		case !isString || s == "":
			errs = append(errs, field.Invalid(fp, v, "must be the model name the engine serves, a non-empty string"))
		case s != served:
			errs = append(errs, field.Invalid(fp, s,
				fmt.Sprintf("another serving worker sets served-model-name %q: every worker serves the one model name the ModelRoute matches", served)))
		}
	}
	return errs
}

func workerTypeStrings(ts []workloadv1alpha1.ModelWorkerType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

// reservedConfigKeys are engine flags the controller sets itself: changing them in config
// would make the engine disagree with the ModelServer and the ModelRoute.
func reservedConfigKeys(b *workloadv1alpha1.ModelBackend, t workloadv1alpha1.ModelWorkerType) []string {
	if !servesModel(t) {
		return nil
	}
	keys := []string{"model", "model-path", "port"}
	if b.CacheURI != "" {
		keys = append(keys, "download-dir")
	}
	return keys
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// uriPath is what follows "<scheme>://".
func uriPath(uri string) string {
	_, rest, _ := strings.Cut(uri, "://")
	return rest
}
