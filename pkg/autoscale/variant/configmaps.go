package variant

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// ServiceClass is one data key of the service class ConfigMap.
type ServiceClass struct {
	Key      string // the ConfigMap data key it was read from
	Name     string
	Priority int // >= 0; smaller is more important
	Models   []ModelSLO
}

// ModelSLO is one entry of a service class's data list.
type ModelSLO struct {
	Model string // model ID, e.g. "meta/llama0-70b"
	SLO
}

type serviceClassYAML struct {
	Name     string `json:"name"`
	Priority int    `json:"priority"`
	Data     []struct {
		Model string  `json:"model"`
		TPOT  float64 `json:"slo-tpot"`
		TTFT  float64 `json:"slo-ttft"`
	} `json:"data"`
}

// ParseServiceClass reads one data entry of the service class ConfigMap: YAML
// with name, priority and a data list of {model, slo-tpot, slo-ttft}, the SLOs in
// milliseconds (a missing or 0 SLO means no target). Unknown fields are errors,
// so a misspelt "slo-tpot" is not silently dropped.
func ParseServiceClass(key, value string) (ServiceClass, error) {
	var doc serviceClassYAML
	if err := yaml.UnmarshalStrict([]byte(value), &doc); err != nil {
		return ServiceClass{}, fmt.Errorf("service class key %q: cannot parse: %w", key, err)
	}
	if doc.Name == "" {
		return ServiceClass{}, fmt.Errorf("service class key %q: missing \"name\"", key)
	}
	where := fmt.Sprintf("service class key %q (class %q)", key, doc.Name)
	if doc.Priority < 0 {
		return ServiceClass{}, fmt.Errorf("%s: priority must be >= 0, got %d", where, doc.Priority)
	}
	sc := ServiceClass{Key: key, Name: doc.Name, Priority: doc.Priority}
	first := map[string]int{}
	for i, d := range doc.Data {
		if d.Model == "" {
			return ServiceClass{}, fmt.Errorf("%s: data[%d]: missing \"model\"", where, i)
		}
		if j, dup := first[d.Model]; dup {
			return ServiceClass{}, fmt.Errorf("%s: data[%d]: model %q is already listed at data[%d]", where, i, d.Model, j)
		}
		first[d.Model] = i
		if !finiteNonNeg(d.TPOT) {
			return ServiceClass{}, fmt.Errorf("%s: data[%d] (model %q): slo-tpot must be a number >= 0, got %v", where, i, d.Model, d.TPOT)
		}
		if !finiteNonNeg(d.TTFT) {
			return ServiceClass{}, fmt.Errorf("%s: data[%d] (model %q): slo-ttft must be a number >= 0, got %v", where, i, d.Model, d.TTFT)
		}
		sc.Models = append(sc.Models, ModelSLO{Model: d.Model, SLO: SLO{TPOT: d.TPOT, TTFT: d.TTFT}})
	}
	return sc, nil
}

// ParseServiceClasses reads every data entry of the service class ConfigMap,
// in key order. The classes returned are those that parsed; the error joins one
// error per key that did not, so a caller may still use the good keys.
func ParseServiceClasses(data map[string]string) ([]ServiceClass, error) {
	var out []ServiceClass
	var errs []error
	for _, key := range sortedKeys(data) {
		sc, err := ParseServiceClass(key, data[key])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, sc)
	}
	return out, errors.Join(errs...)
}

// SLOFor returns the SLO of model in the class read from the ConfigMap data key
// named by spec.sloClassRef.key. An exact model match is required: llm-d has no
// default entry to fall back to.
func SLOFor(classes []ServiceClass, key, model string) (SLO, error) {
	for _, sc := range classes {
		if sc.Key != key {
			continue
		}
		for _, m := range sc.Models {
			if m.Model == model {
				return m.SLO, nil
			}
		}
		return SLO{}, fmt.Errorf("model %q is not listed in service class %q (key %q)", model, sc.Name, key)
	}
	keys := make([]string, 0, len(classes))
	for _, sc := range classes {
		keys = append(keys, sc.Key)
	}
	slices.Sort(keys)
	have := "there are no service classes"
	if len(keys) > 0 {
		have = "keys: " + strings.Join(keys, ", ")
	}
	return SLO{}, fmt.Errorf("service class key %q not found (%s)", key, have)
}

// ParseAcceleratorCosts reads the accelerator unit cost ConfigMap: each data key
// is an accelerator name holding JSON such as
// {"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}. llm-d writes the cost as a
// string; a JSON number is accepted too. Other fields are ignored. The map
// returned holds the keys that parsed; the error joins one error per key that did
// not.
func ParseAcceleratorCosts(data map[string]string) (map[string]float64, error) {
	out := make(map[string]float64, len(data))
	var errs []error
	for _, key := range sortedKeys(data) {
		cost, err := parseAcceleratorCost(data[key])
		if err != nil {
			errs = append(errs, fmt.Errorf("accelerator cost key %q: %w", key, err))
			continue
		}
		out[key] = cost
	}
	return out, errors.Join(errs...)
}

func parseAcceleratorCost(value string) (float64, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(value), &doc); err != nil {
		if _, wrongType := err.(*json.UnmarshalTypeError); wrongType {
			return 0, errors.New(`want a JSON object such as {"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}`)
		}
		return 0, fmt.Errorf("invalid JSON: %w", err)
	}
	raw := string(doc["cost"])
	if raw == "" || raw == "null" {
		return 0, errors.New(`missing "cost"`)
	}
	text := raw
	if strings.HasPrefix(raw, `"`) {
		if err := json.Unmarshal(doc["cost"], &text); err != nil {
			return 0, fmt.Errorf("cost: %w", err)
		}
	}
	cost, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
	if err != nil {
		return 0, fmt.Errorf("cost %s is not a number", raw)
	}
	if cost < 0 || math.IsInf(cost, 0) || math.IsNaN(cost) {
		return 0, fmt.Errorf("cost must be a finite number >= 0, got %s", raw)
	}
	return cost, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
