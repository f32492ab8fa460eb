package binding

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
)

// An AutoscalingPolicyBinding whose opt-in label is removed (handed back to Kthena's
// autoscaler under --manage=berth) loses the series Berth published for it.
func TestReconcileForgetsBindingLeavingScope(t *testing.T) {
	s := runtime.NewScheme()
	if err := workloadv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := &workloadv1alpha1.AutoscalingPolicyBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "handed-back"}}
	r := &Reconciler{Scope: scope.Berth, Client: fake.NewClientBuilder().WithScheme(s).WithObjects(b).Build()}
	desiredReplicas.WithLabelValues("ns", "handed-back", "ModelServing/llm").Set(3)
	desiredReplicas.WithLabelValues("ns", "other", "ModelServing/llm2").Set(1)
	t.Cleanup(func() { forget("ns", "handed-back"); forget("ns", "other") })

	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "handed-back"}}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(desiredReplicas); n != 1 {
		t.Errorf("berth_autoscaler_desired_replicas has %d series, want only the other binding's", n)
	}
}
