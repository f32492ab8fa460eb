package variantscaler

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
)

// A VariantAutoscaling whose opt-in label is removed (handed back to llm-d's autoscaler under
// --manage=berth) loses the inferno_* series Berth published for it, so an HPA reading
// inferno_desired_replicas sees only llm-d's; another variant keeps its series.
func TestReconcileForgetsVariantLeavingScope(t *testing.T) {
	s := runtime.NewScheme()
	if err := llmdv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	va := &llmdv1alpha1.VariantAutoscaling{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "handed-back"}}
	r := &Reconciler{Scope: scope.Berth, Client: fake.NewClientBuilder().WithScheme(s).WithObjects(va).Build()}
	desiredReplicas.WithLabelValues("handed-back", "ns", "H100").Set(3)
	currentReplicas.WithLabelValues("handed-back", "ns", "H100").Set(2)
	desiredReplicas.WithLabelValues("other", "ns", "H100").Set(1)
	t.Cleanup(func() { forget("ns", "handed-back"); forget("ns", "other") })

	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "handed-back"}}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(desiredReplicas); n != 1 {
		t.Errorf("inferno_desired_replicas has %d series, want only the other variant's", n)
	}
	if n := testutil.CollectAndCount(currentReplicas); n != 0 {
		t.Errorf("inferno_current_replicas has %d series for a variant Berth no longer sizes", n)
	}
}
