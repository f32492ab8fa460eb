package tenant

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Selector is the label selector of the key Secrets' list and watch. RBAC cannot grant
// access by label, so the router's role allows list and watch on every Secret; the
// selector is what keeps the router from ever receiving another one.
var Selector = labels.SelectorFromSet(labels.Set{APIKeyLabel: "true"}).String()

// Watcher keeps Keys current from the key Secrets of some namespaces.
type Watcher struct {
	keys      *Keys
	log       logr.Logger
	factories []informers.SharedInformerFactory
	listers   []cache.Indexer
	synced    []cache.InformerSynced
	// OnChange, when set before Start, is called after every reload with the problems.
	OnChange func(keys int, problems []Problem)
}

// NewWatcher watches the key Secrets of namespaces (none: every namespace) into keys.
func NewWatcher(kube kubernetes.Interface, namespaces []string, keys *Keys, log logr.Logger) (*Watcher, error) {
	if len(namespaces) == 0 {
		namespaces = []string{corev1.NamespaceAll}
	}
	w := &Watcher{keys: keys, log: log}
	for _, ns := range namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = Selector }),
			informers.WithTransform(Strip))
		inf := f.Core().V1().Secrets().Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { w.reload() },
			UpdateFunc: func(any, any) { w.reload() },
			DeleteFunc: func(any) { w.reload() },
		}); err != nil {
			return nil, err
		}
		w.factories = append(w.factories, f)
		w.listers = append(w.listers, inf.GetIndexer())
		w.synced = append(w.synced, inf.HasSynced)
	}
	return w, nil
}

// Start runs the informers until ctx ends and waits for their first list (or ctx, or
// timeout), then loads the keys.
func (w *Watcher) Start(ctx context.Context, timeout time.Duration) error {
	for _, f := range w.factories {
		f.Start(ctx.Done())
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), w.synced...) {
		return fmt.Errorf("listing the API key Secrets (label %s) did not finish within %s", Selector, timeout)
	}
	w.reload()
	return nil
}

// reload rebuilds Keys from the informers' caches: a handful of Secrets, and every event
// then leaves Keys exactly as the cache says.
func (w *Watcher) reload() {
	var secrets []*corev1.Secret
	for _, l := range w.listers {
		for _, o := range l.List() {
			if s, ok := o.(*corev1.Secret); ok {
				secrets = append(secrets, s)
			}
		}
	}
	problems := w.keys.Replace(secrets)
	for _, p := range problems {
		w.log.Error(nil, "API key Secret not loaded", "secret", p.Secret, "reason", p.Reason)
	}
	if w.OnChange != nil {
		w.OnChange(w.keys.Len(), problems)
	}
}
