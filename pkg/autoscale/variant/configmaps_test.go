package variant

import (
	"reflect"
	"testing"
)

// llm-d's deploy/configmap-serviceclass.yaml data, verbatim in shape.
var serviceClassData = map[string]string{
	"premium.yaml": `name: Premium
priority: 1
data:
  - model: default/default
    slo-tpot: 24
    slo-ttft: 500
  - model: meta/llama0-70b
    slo-tpot: 80
    slo-ttft: 500
`,
	"freemium.yaml": `name: Freemium
priority: 10
data:
  - model: ibm/granite-13b
    slo-tpot: 200
    slo-ttft: 2000
  - model: meta/llama0-7b
    slo-tpot: 150
    slo-ttft: 1500
`,
}

func TestParseServiceClasses(t *testing.T) {
	classes, err := ParseServiceClasses(serviceClassData)
	if err != nil {
		t.Fatal(err)
	}
	want := []ServiceClass{
		{Key: "freemium.yaml", Name: "Freemium", Priority: 10, Models: []ModelSLO{
			{Model: "ibm/granite-13b", SLO: SLO{TPOT: 200, TTFT: 2000}},
			{Model: "meta/llama0-7b", SLO: SLO{TPOT: 150, TTFT: 1500}},
		}},
		{Key: "premium.yaml", Name: "Premium", Priority: 1, Models: []ModelSLO{
			{Model: "default/default", SLO: SLO{TPOT: 24, TTFT: 500}},
			{Model: "meta/llama0-70b", SLO: SLO{TPOT: 80, TTFT: 500}},
		}},
	}
	if !reflect.DeepEqual(classes, want) {
		t.Fatalf("classes = %+v\nwant %+v", classes, want)
	}

	slo, err := SLOFor(classes, "premium.yaml", "meta/llama0-70b")
	if err != nil || slo != (SLO{TPOT: 80, TTFT: 500}) {
		t.Errorf("SLOFor premium/llama0-70b = %+v, %v", slo, err)
	}
	slo, err = SLOFor(classes, "freemium.yaml", "ibm/granite-13b")
	if err != nil || slo != (SLO{TPOT: 200, TTFT: 2000}) {
		t.Errorf("SLOFor freemium/granite = %+v, %v", slo, err)
	}
}

func TestSLOForErrors(t *testing.T) {
	classes, err := ParseServiceClasses(serviceClassData)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		classes    []ServiceClass
		key, model string
		want       string
	}{
		{classes, "gold.yaml", "meta/llama0-70b", `service class key "gold.yaml" not found (keys: freemium.yaml, premium.yaml)`},
		{nil, "premium.yaml", "meta/llama0-70b", `service class key "premium.yaml" not found (there are no service classes)`},
		// Listed in Freemium but the reference names Premium: no search of other classes.
		{classes, "premium.yaml", "meta/llama0-7b", `model "meta/llama0-7b" is not listed in service class "Premium" (key "premium.yaml")`},
		// Premium has a default/default entry; it is a model name, not a fallback.
		{classes, "premium.yaml", "acme/unknown", `model "acme/unknown" is not listed in service class "Premium" (key "premium.yaml")`},
	} {
		_, err := SLOFor(tc.classes, tc.key, tc.model)
		if err == nil || err.Error() != tc.want {
			t.Errorf("SLOFor(%q, %q) error = %v\nwant %s", tc.key, tc.model, err, tc.want)
		}
	}
}

func TestParseServiceClassErrors(t *testing.T) {
	for _, tc := range []struct {
		value, want string
	}{
		{ // slo-ttft indented one space short of its entry: a YAML syntax error on line 5
			"name: Premium\npriority: 1\ndata:\n  - model: a\n    slo-tpot: 24\n   slo-ttft: 500\n",
			`service class key "k": cannot parse: error converting YAML to JSON: yaml: line 5: did not find expected '-' indicator`,
		},
		{
			"name: Premium\ndata:\n  - model: a\n    slo-itl: 24\n",
			`service class key "k": cannot parse: error unmarshaling JSON: while decoding JSON: json: unknown field "slo-itl"`,
		},
		{
			"name: Premium\ndata:\n  - model: a\n    slo-tpot: fast\n",
			`service class key "k": cannot parse: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal string into Go struct field .data.slo-tpot of type float64`,
		},
		{
			"priority: 1\ndata: []\n",
			`service class key "k": missing "name"`,
		},
		{
			"name: Premium\npriority: -1\n",
			`service class key "k" (class "Premium"): priority must be >= 0, got -1`,
		},
		{
			"name: Premium\ndata:\n  - slo-tpot: 24\n",
			`service class key "k" (class "Premium"): data[0]: missing "model"`,
		},
		{
			"name: Premium\ndata:\n  - model: a\n  - model: b\n  - model: a\n",
			`service class key "k" (class "Premium"): data[2]: model "a" is already listed at data[0]`,
		},
		{
			"name: Premium\ndata:\n  - model: a\n    slo-tpot: 24\n    slo-ttft: -500\n",
			`service class key "k" (class "Premium"): data[0] (model "a"): slo-ttft must be a number >= 0, got -500`,
		},
	} {
		_, err := ParseServiceClass("k", tc.value)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseServiceClass(%q)\n error %v\n want  %s", tc.value, err, tc.want)
		}
	}
}

func TestParseServiceClassDecimalAndMissingSLO(t *testing.T) {
	// Decimal milliseconds are accepted; a missing SLO is 0, i.e. no target (as in llm-d).
	sc, err := ParseServiceClass("k", "name: Batch\ndata:\n  - model: m\n    slo-tpot: 12.5\n")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Priority != 0 || len(sc.Models) != 1 || sc.Models[0].SLO != (SLO{TPOT: 12.5}) {
		t.Errorf("got %+v", sc)
	}
}

func TestParseServiceClassesKeepsGoodKeys(t *testing.T) {
	data := map[string]string{
		"premium.yaml": serviceClassData["premium.yaml"],
		"broken.yaml":  "name: [\n",
		"nameless":     "priority: 2\n",
	}
	classes, err := ParseServiceClasses(data)
	want := `service class key "broken.yaml": cannot parse: error converting YAML to JSON: yaml: line 1: did not find expected node content` + "\n" +
		`service class key "nameless": missing "name"`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant %s", err, want)
	}
	if len(classes) != 1 || classes[0].Key != "premium.yaml" {
		t.Errorf("classes = %+v, want premium.yaml only", classes)
	}
}

// llm-d's deploy/configmap-accelerator-unitcost.yaml data plus its chart's H100 entry.
func TestParseAcceleratorCosts(t *testing.T) {
	costs, err := ParseAcceleratorCosts(map[string]string{
		"A100":   "{\n\"device\": \"NVIDIA-A100-PCIE-80GB\",\n\"cost\": \"40.00\"\n}",
		"MI300X": "{\n\"device\": \"AMD-MI300X-192GB\",\n\"cost\": \"65.00\"\n}",
		"G2":     "{\n\"device\": \"Intel-Gaudi-2-96GB\",\n\"cost\": \"23.00\"\n}",
		"H100":   `{"device": "NVIDIA-H100-80GB-HBM3", "cost": "100.0"}`,
		"L4":     `{"cost": 12.5}`, // a JSON number is accepted too
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"A100": 40, "MI300X": 65, "G2": 23, "H100": 100, "L4": 12.5}
	if !reflect.DeepEqual(costs, want) {
		t.Errorf("costs = %v, want %v", costs, want)
	}
}

func TestParseAcceleratorCostsErrors(t *testing.T) {
	costs, err := ParseAcceleratorCosts(map[string]string{
		"A100": `{"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}`,
		"B":    `{"device": "x", "cost": "40.00"`,
		"C":    `{"device": "x"}`,
		"D":    `{"cost": "forty"}`,
		"E":    `{"cost": "-1"}`,
		"F":    `"40.00"`,
		"G":    `{"cost": true}`,
	})
	want := `accelerator cost key "B": invalid JSON: unexpected end of JSON input` + "\n" +
		`accelerator cost key "C": missing "cost"` + "\n" +
		`accelerator cost key "D": cost "forty" is not a number` + "\n" +
		`accelerator cost key "E": cost must be a finite number >= 0, got "-1"` + "\n" +
		`accelerator cost key "F": want a JSON object such as {"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}` + "\n" +
		`accelerator cost key "G": cost true is not a number`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant %s", err, want)
	}
	if !reflect.DeepEqual(costs, map[string]float64{"A100": 40}) {
		t.Errorf("costs = %v, want only A100", costs)
	}
}
