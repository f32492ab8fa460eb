// Command crdtrim drops the descriptions inside embedded core/v1 PodSpec schemas of the
// CRDs it is given, in place.
//
// Why: a ModelServing embeds two PodSpecs per role (entry and worker). With every upstream
// description kept its CRD is 1.4 MiB, close to etcd's request limit and far past what
// client-side `kubectl apply` can store in its annotation. Our own fields keep their
// descriptions, so `kubectl explain modelserving.spec.template` stays useful; the PodSpec
// fields are documented by `kubectl explain pod.spec` already.
//
// With -json it writes the CRD as one line of compact JSON beside the input (x.yaml becomes
// x.json) and removes the input: LeaderWorkerSet's CRD, trimmed, is still 475 KB of YAML (its
// deep nesting is mostly indentation) and 160 KB of JSON, which kubectl, Helm's fromYaml and
// the test control plane read alike.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// podTemplateFields are the properties whose `spec` child is a core/v1 PodSpec.
var podTemplateFields = map[string]bool{"entryTemplate": true, "workerTemplate": true, "leaderTemplate": true}

func main() {
	asJSON := flag.Bool("json", false, "write compact JSON to <name>.json and remove the YAML input")
	flag.Parse()
	for _, path := range flag.Args() {
		if err := trimFile(path, *asJSON); err != nil {
			fmt.Fprintf(os.Stderr, "crdtrim: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
}

func trimFile(path string, asJSON bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return err
	}
	for i := range crd.Spec.Versions {
		if s := crd.Spec.Versions[i].Schema; s != nil && s.OpenAPIV3Schema != nil {
			walk(s.OpenAPIV3Schema)
		}
	}
	// Marshal through a map to drop the empty status block the typed struct carries;
	// controller-gen never writes one and the apiserver owns it.
	typed, err := yaml.Marshal(&crd)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(typed, &doc); err != nil {
		return err
	}
	delete(doc, "status")
	if meta, ok := doc["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	if asJSON {
		out, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		if err := os.WriteFile(strings.TrimSuffix(path, ".yaml")+".json", append(out, '\n'), 0o644); err != nil {
			return err
		}
		return os.Remove(path)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	// controller-gen starts its files with a document marker; keep that so diffs stay small.
	out = append([]byte("---\n"), bytes.TrimPrefix(out, []byte("---\n"))...)
	return os.WriteFile(path, out, 0o644)
}

// walk finds pod templates anywhere in the schema and strips their PodSpec descriptions.
func walk(s *apiextensionsv1.JSONSchemaProps) {
	for name, child := range s.Properties {
		if podTemplateFields[name] {
			if spec, ok := child.Properties["spec"]; ok {
				stripDescriptions(&spec)
				child.Properties["spec"] = spec
			}
		}
		walk(&child)
		s.Properties[name] = child
	}
	if s.Items != nil && s.Items.Schema != nil {
		walk(s.Items.Schema)
	}
}

func stripDescriptions(s *apiextensionsv1.JSONSchemaProps) {
	s.Description = ""
	for name, child := range s.Properties {
		stripDescriptions(&child)
		s.Properties[name] = child
	}
	if s.Items != nil && s.Items.Schema != nil {
		stripDescriptions(s.Items.Schema)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		stripDescriptions(s.AdditionalProperties.Schema)
	}
}
