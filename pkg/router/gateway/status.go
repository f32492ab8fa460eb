package gateway

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// StatusWriter writes the latest Status Build decided to the objects it describes, only
// where it differs from what they show: every router replica runs one, and replicas that
// see the same objects decide the same status, so they agree instead of taking turns.
type StatusWriter struct {
	// Client writes status; Reader reads the objects (the view's cache).
	Client client.Client
	Reader client.Reader
	Log    logr.Logger
	// Addresses go into the status.addresses of every Gateway whose Programmed condition is
	// True (a Gateway not served has none).
	Addresses []gwv1.GatewayStatusAddress

	latest chan *Status
}

// NewStatusWriter returns a writer; call Run.
func NewStatusWriter(c client.Client, r client.Reader, log logr.Logger) *StatusWriter {
	return &StatusWriter{Client: c, Reader: r, Log: log, latest: make(chan *Status, 1)}
}

// Publish hands the writer a new Status; one not written yet is replaced.
func (w *StatusWriter) Publish(s *Status) {
	for {
		select {
		case w.latest <- s:
			return
		default:
		}
		select {
		case <-w.latest:
		default:
		}
	}
}

// Run writes until ctx ends. A write that fails (a conflict with another writer, the
// apiserver away) is tried again a second later unless a newer Status came.
func (w *StatusWriter) Run(ctx context.Context) {
	var pending *Status
	for {
		var retry <-chan time.Time
		if pending != nil {
			retry = time.After(time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case s := <-w.latest:
			pending = s
		case <-retry:
		}
		if err := w.write(ctx, pending); err != nil {
			if ctx.Err() == nil {
				w.Log.V(1).Info("writing Gateway API status; trying again", "err", err.Error())
			}
			continue
		}
		pending = nil
	}
}

func (w *StatusWriter) write(ctx context.Context, s *Status) error {
	var errs []error
	for name, conds := range s.Classes {
		var c gwv1.GatewayClass
		if err := w.Reader.Get(ctx, types.NamespacedName{Name: name}, &c); err != nil {
			errs = append(errs, ignoreGone(err))
			continue
		}
		next := c.DeepCopy()
		next.Status.Conditions = merge(c.Status.Conditions, conds)
		errs = append(errs, w.update(ctx, &c, next, equality.Semantic.DeepEqual(c.Status, next.Status)))
	}
	for key, gs := range s.Gateways {
		var g gwv1.Gateway
		if err := w.Reader.Get(ctx, key, &g); err != nil {
			errs = append(errs, ignoreGone(err))
			continue
		}
		next := g.DeepCopy()
		next.Status.Conditions = merge(g.Status.Conditions, gs.Conditions)
		next.Status.Addresses = nil
		if meta.IsStatusConditionTrue(gs.Conditions, string(gwv1.GatewayConditionProgrammed)) {
			next.Status.Addresses = w.Addresses
		}
		next.Status.Listeners = nil
		for _, l := range gs.Listeners {
			var old []metav1.Condition
			for _, ol := range g.Status.Listeners {
				if ol.Name == l.Name {
					old = ol.Conditions
				}
			}
			l.Conditions = merge(old, l.Conditions)
			next.Status.Listeners = append(next.Status.Listeners, l)
		}
		errs = append(errs, w.update(ctx, &g, next, equality.Semantic.DeepEqual(g.Status, next.Status)))
	}
	for key, parents := range s.Routes {
		var r gwv1.HTTPRoute
		if err := w.Reader.Get(ctx, key, &r); err != nil {
			errs = append(errs, ignoreGone(err))
			continue
		}
		next := r.DeepCopy()
		next.Status.Parents = nil
		for _, p := range r.Status.Parents {
			if p.ControllerName != ControllerName {
				next.Status.Parents = append(next.Status.Parents, p)
			}
		}
		for _, p := range parents {
			for _, op := range r.Status.Parents {
				if op.ControllerName == ControllerName && equality.Semantic.DeepEqual(op.ParentRef, p.ParentRef) {
					p.Conditions = merge(op.Conditions, p.Conditions)
				}
			}
			p.Conditions = merge(nil, p.Conditions)
			next.Status.Parents = append(next.Status.Parents, p)
		}
		errs = append(errs, w.update(ctx, &r, next, equality.Semantic.DeepEqual(r.Status, next.Status)))
	}
	for key, parents := range s.Pools {
		var p infv1.InferencePool
		if err := w.Reader.Get(ctx, key, &p); err != nil {
			errs = append(errs, ignoreGone(err))
			continue
		}
		next := p.DeepCopy()
		next.Status.Parents = nil
		for _, ps := range p.Status.Parents {
			if ps.ControllerName != infv1.ControllerName(ControllerName) {
				next.Status.Parents = append(next.Status.Parents, ps)
			}
		}
		for _, ps := range parents {
			for _, old := range p.Status.Parents {
				if old.ControllerName == infv1.ControllerName(ControllerName) && equality.Semantic.DeepEqual(old.ParentRef, ps.ParentRef) {
					ps.Conditions = merge(old.Conditions, ps.Conditions)
				}
			}
			ps.Conditions = merge(nil, ps.Conditions)
			next.Status.Parents = append(next.Status.Parents, ps)
		}
		errs = append(errs, w.update(ctx, &p, next, equality.Semantic.DeepEqual(p.Status, next.Status)))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *StatusWriter) update(ctx context.Context, old, next client.Object, same bool) error {
	if same {
		return nil
	}
	if err := w.Client.Status().Update(ctx, next); err != nil {
		return fmt.Errorf("%T %s/%s: %w", old, old.GetNamespace(), old.GetName(), ignoreGone(err))
	}
	w.Log.V(1).Info("wrote Gateway API status", "kind", fmt.Sprintf("%T", old), "object", client.ObjectKeyFromObject(old).String())
	return nil
}

// StatusAddresses are the status.addresses of the router's Gateways: each of addrs, an
// IPAddress or a Hostname; without addrs, host when it is one IP address (the listeners
// are opened there), else none.
func StatusAddresses(addrs []string, host string) []gwv1.GatewayStatusAddress {
	if len(addrs) == 0 {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			addrs = []string{host}
		}
	}
	var out []gwv1.GatewayStatusAddress
	for _, a := range addrs {
		typ := gwv1.HostnameAddressType
		if net.ParseIP(a) != nil {
			typ = gwv1.IPAddressType
		}
		out = append(out, gwv1.GatewayStatusAddress{Type: &typ, Value: a})
	}
	return out
}

func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// merge returns want, each condition keeping old's lastTransitionTime when its status did
// not change (meta.SetStatusCondition's rule), in want's order.
func merge(old []metav1.Condition, want []metav1.Condition) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(want))
	now := metav1.Now()
	for _, c := range want {
		if o := meta.FindStatusCondition(old, c.Type); o != nil && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
			c.LastTransitionTime = o.LastTransitionTime
		} else if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = now
		}
		out = append(out, c)
	}
	return out
}
