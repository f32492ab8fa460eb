package scope

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

func TestManages(t *testing.T) {
	optIn := map[string]string{workloadv1alpha1.ManagedLabel: "true"}
	serving := func(scheduler string, labels map[string]string) *workloadv1alpha1.ModelServing {
		return &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: workloadv1alpha1.ModelServingSpec{SchedulerName: scheduler}}
	}
	for _, c := range []struct {
		name string
		m    Mode
		obj  client.Object
		want bool
	}{
		{"all: a Kthena ModelServing on volcano", All, serving("volcano", nil), true},
		{"zero mode is all", "", &workloadv1alpha1.ModelBooster{}, true},
		{"berth: a ModelServing on berth-scheduler", Berth, serving("berth-scheduler", nil), true},
		{"berth: a ModelServing on volcano", Berth, serving("volcano", nil), false},
		{"berth: a ModelServing on the default scheduler", Berth, serving("", nil), false},
		{"berth: a ModelServing on volcano that opts in", Berth, serving("volcano", optIn), true},
		{"berth: a ModelBooster without the label", Berth, &workloadv1alpha1.ModelBooster{}, false},
		{"berth: a ModelBooster with it", Berth, &workloadv1alpha1.ModelBooster{ObjectMeta: metav1.ObjectMeta{Labels: optIn}}, true},
		{"berth: the label set to false", Berth, &llmdv1alpha1.VariantAutoscaling{ObjectMeta: metav1.ObjectMeta{
			Labels: map[string]string{workloadv1alpha1.ManagedLabel: "false"}}}, false},
	} {
		if got := c.m.Manages(c.obj); got != c.want {
			t.Errorf("%s: Manages = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]Mode{"": All, "all": All, "berth": Berth} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Parse("kthena"); err == nil {
		t.Error(`Parse("kthena") accepted`)
	}
}

func TestInherit(t *testing.T) {
	from := &workloadv1alpha1.ModelBooster{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{workloadv1alpha1.ManagedLabel: "true"}}}
	got := Inherit(from, map[string]string{"a": "b"})
	if got["a"] != "b" || got[workloadv1alpha1.ManagedLabel] != "true" {
		t.Errorf("Inherit from an opted-in object = %v", got)
	}
	if got := Inherit(&workloadv1alpha1.ModelBooster{}, nil); got != nil {
		t.Errorf("Inherit from an object without the label = %v, want nil", got)
	}
}
