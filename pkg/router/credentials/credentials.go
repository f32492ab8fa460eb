// Package credentials keeps the credentials of ExternalModelProviders current: for every
// Secret some provider references it runs one watch limited to that Secret (a field
// selector on its name, in its namespace, and a label selector on
// networking.serving.volcano.sh/external-model-provider-credential=true), and stops it when
// no provider references the Secret any more. No other Secret enters the router's memory,
// and a Secret an administrator did not label for providers is never read.
package credentials

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

// ErrNotLoaded is wrapped by the error of a lookup made before the Secret's watch finished
// its first list: the answer is not known yet (unlike "not found", which is).
var ErrNotLoaded = errors.New("not loaded yet")

// Store watches the referenced Secrets. Create with New; Sync sets what to watch.
type Store struct {
	kube     kubernetes.Interface
	log      logr.Logger
	onChange func()
	// label is the label selector a watched Secret must match ("" none: NewCertificates).
	label string

	mu      sync.Mutex
	watches map[types.NamespacedName]*secretWatch
}

type secretWatch struct {
	informer toolscache.SharedIndexInformer
	stop     chan struct{}
}

// New returns a store reading Secrets through kube; onChange is called (from an informer
// goroutine) whenever a watched Secret is added, changed or deleted.
func New(kube kubernetes.Interface, log logr.Logger, onChange func()) *Store {
	return &Store{kube: kube, log: log, onChange: onChange, watches: map[types.NamespacedName]*secretWatch{},
		label: networkingv1alpha1.ExternalModelProviderCredentialLabel + "=true"}
}

// NewCertificates returns a store for the TLS Secrets Gateway listeners name
// (tls.certificateRefs): the Gateway API sets no label on them, so any Secret a Gateway names
// is watched, still one watch per Secret. Read them with Data.
func NewCertificates(kube kubernetes.Interface, log logr.Logger, onChange func()) *Store {
	return &Store{kube: kube, log: log, onChange: onChange, watches: map[types.NamespacedName]*secretWatch{}}
}

// Data returns the data of the watched Secret ref.
func (s *Store) Data(ref types.NamespacedName) (map[string][]byte, error) {
	s.mu.Lock()
	w := s.watches[ref]
	s.mu.Unlock()
	switch {
	case w == nil:
		return nil, fmt.Errorf("Secret %s is not watched", ref)
	case !w.informer.HasSynced():
		return nil, fmt.Errorf("Secret %s is %w", ref, ErrNotLoaded)
	}
	obj, ok, _ := w.informer.GetStore().GetByKey(ref.Namespace + "/" + ref.Name)
	if !ok {
		return nil, fmt.Errorf("Secret %s not found", ref)
	}
	return obj.(*corev1.Secret).Data, nil
}

// Sync watches exactly the Secrets in refs: it starts a watch for each new one and stops
// those no longer referenced. It does not wait for a new watch's first list.
func (s *Store) Sync(refs map[types.NamespacedName]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ref, w := range s.watches {
		if !refs[ref] {
			close(w.stop)
			delete(s.watches, ref)
		}
	}
	for ref := range refs {
		if _, ok := s.watches[ref]; ok {
			continue
		}
		w := &secretWatch{informer: s.informer(ref), stop: make(chan struct{})}
		notify := func() {
			if s.onChange != nil {
				s.onChange()
			}
		}
		_, _ = w.informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { notify() },
			UpdateFunc: func(_, _ any) { notify() },
			DeleteFunc: func(any) { notify() },
		})
		s.watches[ref] = w
		go w.informer.Run(w.stop)
		// A first list that finds nothing (the Secret is missing or unlabelled) calls no
		// handler, yet it ends "not loaded yet": say so once it is synced, or a provider
		// would keep that reason until some other event.
		go func() {
			if toolscache.WaitForCacheSync(w.stop, w.informer.HasSynced) {
				notify()
			}
		}()
	}
}

func (s *Store) informer(ref types.NamespacedName) toolscache.SharedIndexInformer {
	tweak := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
		o.LabelSelector = s.label
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return s.kube.CoreV1().Secrets(ref.Namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return s.kube.CoreV1().Secrets(ref.Namespace).Watch(ctx, o)
		},
	}
	// As client-go's generated informers: a client that cannot stream lists (a fake) says so.
	inf := toolscache.NewSharedIndexInformer(toolscache.ToListWatcherWithWatchListSemantics(lw, s.kube), &corev1.Secret{}, 0, toolscache.Indexers{})
	// Only the data is read; the rest of the object (managed fields, annotations such as
	// kubectl's last-applied configuration, which holds the data again) is dropped.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if sec, ok := obj.(*corev1.Secret); ok {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sec.Namespace, Name: sec.Name, ResourceVersion: sec.ResourceVersion}, Data: sec.Data}, nil
		}
		return obj, nil
	})
	return inf
}

// Stop ends every watch.
func (s *Store) Stop() { s.Sync(nil) }

// Lookup is a credential's state.
type Lookup struct {
	Value string
	// Err says why there is no usable value (nil when Value is set). It names the Secret
	// and key, never the value.
	Err error
}

// Get returns the credential at key of the Secret ref, trimmed of surrounding white
// space (what `kubectl create secret --from-file` of a file ending in a newline leaves).
func (s *Store) Get(ref types.NamespacedName, key string) Lookup {
	s.mu.Lock()
	w := s.watches[ref]
	s.mu.Unlock()
	if w == nil {
		return Lookup{Err: fmt.Errorf("Secret %s is not watched", ref)}
	}
	if !w.informer.HasSynced() {
		return Lookup{Err: fmt.Errorf("Secret %s is %w", ref, ErrNotLoaded)}
	}
	obj, ok, _ := w.informer.GetStore().GetByKey(ref.Namespace + "/" + ref.Name)
	if !ok {
		return Lookup{Err: fmt.Errorf("Secret %s not found, or not labelled %s=true", ref, networkingv1alpha1.ExternalModelProviderCredentialLabel)}
	}
	raw, ok := obj.(*corev1.Secret).Data[key]
	if !ok {
		return Lookup{Err: fmt.Errorf("Secret %s has no key %q", ref, key)}
	}
	v := strings.TrimSpace(string(raw))
	switch {
	case v == "":
		return Lookup{Err: fmt.Errorf("Secret %s key %q is empty", ref, key)}
	case !headerValue(v):
		return Lookup{Err: fmt.Errorf("Secret %s key %q holds characters an HTTP header cannot carry", ref, key)}
	}
	return Lookup{Value: v}
}

// headerValue reports whether v can be an HTTP header value: no control characters but tab
// (RFC 9110 §5.5), so a credential cannot smuggle a second header line.
func headerValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
