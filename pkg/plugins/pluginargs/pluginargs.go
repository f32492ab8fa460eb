// Package pluginargs decodes a berth-scheduler plugin's args (pluginConfig.args in the
// KubeSchedulerConfiguration) strictly.
//
// kube-scheduler hands an out-of-tree plugin its args undecoded, as a *runtime.Unknown, and
// frameworkruntime.DecodeInto decodes them leniently: a misspelt field is dropped without a
// word and the plugin runs on its default. Like the in-tree plugins/helper package, this is
// a helper the plugins share, not a plugin.
package pluginargs

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// MaxSeconds is the most whole seconds a time.Duration holds (about 292 years). An arg in
// seconds beyond it, either way, would wrap around when turned into a duration.
const MaxSeconds = math.MaxInt64 / int64(time.Second)

// Decode fills args from obj as kube-scheduler hands it over: nil (the profile has no
// pluginConfig entry for the plugin) leaves args as they are; a *runtime.Unknown holds the
// entry's JSON (or YAML). Field names match exactly, as in every Kubernetes API.
//
// strict lists every field args has no place for and every field given twice, each by its
// path (`unknown field "nodeLabelTiers[0].lable"`). The fields that do decode are set even
// then, so the caller can validate them too and report every mistake at once. err is set,
// and strict is empty, when obj cannot be decoded at all.
func Decode(obj runtime.Object, args any) (strict []error, err error) {
	if obj == nil {
		return nil, nil
	}
	u, ok := obj.(*runtime.Unknown)
	if !ok {
		return nil, fmt.Errorf("want args of type runtime.Unknown, got %T", obj)
	}
	raw := u.Raw
	if len(raw) == 0 {
		return nil, nil
	}
	switch u.ContentType {
	case runtime.ContentTypeJSON, "":
	case runtime.ContentTypeYAML:
		if raw, err = yaml.YAMLToJSON(raw); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("not supported content type %s", u.ContentType)
	}
	return kjson.UnmarshalStrict(raw, args)
}
