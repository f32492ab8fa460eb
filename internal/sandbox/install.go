package sandbox

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	schedulermanifests "github.com/berth-sh/berth/manifests/scheduler"
)

// Where a cluster with Berth installed from manifests/ has it, and what tools (the
// end-to-end suite) read to find out how Berth is installed.
const (
	InstallNamespace = "berth-system"
	// SchedulerConfigMap holds berth-scheduler's configuration, as manifests/scheduler
	// installs it.
	SchedulerConfigMap = "berth-scheduler-config"
	// MarkerConfigMap exists only in a sandbox: Berth's components run in the sandbox's
	// process, not as the Deployments of manifests/.
	MarkerConfigMap = "berth-sandbox"
)

// publishInstallation creates berth-system with the scheduler's configuration (the shipped
// one, which the in-process berth-scheduler runs) and the sandbox marker.
func publishInstallation(ctx context.Context, kube kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: InstallNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Namespace: InstallNamespace, Name: SchedulerConfigMap},
			Data: map[string]string{"config.yaml": string(schedulermanifests.Config)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: InstallNamespace, Name: MarkerConfigMap},
			Data: map[string]string{"components": "berth-scheduler, berth-controller, berth-router, kube-scheduler, " +
				"kube-controller-manager's garbage collector, namespace, Deployment, ReplicaSet and ResourceClaim controllers, " +
				"the simulated kubelet (and gpu.nvidia.com DRA driver) and engines: all in the sandbox process"}},
	} {
		if _, err := kube.CoreV1().ConfigMaps(InstallNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
	}
	return nil
}
