package scheduler

import (
	"context"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Build builds the scheduler from o's configuration with every plugin of its profiles, and
// releases it without scheduling anything: for tests of configurations.
func Build(ctx context.Context, o Options) error {
	_, _, release, err := setup(ctx, o)
	if err == nil {
		release()
	}
	return err
}

// RequiredAPIs is requiredAPIs, for the tests.
var RequiredAPIs = requiredAPIs

// Informers builds the scheduler from o's configuration, starts the informers
// kube-scheduler's framework registered for it (typed and dynamic, as app.Run starts them)
// and returns the resources they list.
func Informers(ctx context.Context, o Options) ([]schema.GroupVersionResource, error) {
	cc, _, release, err := setup(ctx, o)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cc.InformerFactory.Start(ctx.Done())
	cc.DynInformerFactory.Start(ctx.Done())
	var out []schema.GroupVersionResource
	for typ := range cc.InformerFactory.WaitForCacheSync(ctx.Done()) {
		gvks, _, err := clientgoscheme.Scheme.ObjectKinds(reflect.New(typ.Elem()).Interface().(runtime.Object))
		if err != nil {
			return nil, err
		}
		gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
		out = append(out, gvr)
	}
	for gvr := range cc.DynInformerFactory.WaitForCacheSync(ctx.Done()) {
		out = append(out, gvr)
	}
	return out, nil
}
