package view

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/credentials"
	"github.com/berth-sh/berth/pkg/router/gateway"
)

// gatewaySource is what EnableGateway hands the view.
type gatewaySource struct {
	bind  func(map[int32]bool) map[int32]error
	certs *credentials.Store // the Secrets HTTPS listeners name
}

// EnableGateway makes the view read GatewayClasses, Gateways, HTTPRoutes, ReferenceGrants,
// InferencePools, Services and EndpointSlices, and the Secrets HTTPS listeners name (one
// watch each), and compile them (package gateway) into every Snapshot. bind opens the
// Gateways' listener ports (see gateway.Input.Bind). Call before Run.
func (v *View) EnableGateway(kube kubernetes.Interface, bind func(map[int32]bool) map[int32]error) {
	v.gw = &gatewaySource{bind: bind, certs: credentials.NewCertificates(kube, v.log.WithName("certificates"), v.markStale)}
}

// certificate loads a kubernetes.io/tls Secret's tls.crt and tls.key. A rotated Secret is
// read on the next rebuild, and new connections get it.
func (g *gatewaySource) certificate(ref types.NamespacedName) (*tls.Certificate, error) {
	data, err := g.certs.Data(ref)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)
	}
	return &cert, nil
}

// Reader reads the view's informer cache (the StatusWriter compares with it).
func (v *View) Reader() client.Reader { return v.cache }

func gatewayObjects() []client.Object {
	return []client.Object{&gwv1.GatewayClass{}, &gwv1.Gateway{}, &gwv1.HTTPRoute{}, &gwv1.ReferenceGrant{},
		&infv1.InferencePool{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.Namespace{}}
}

func (v *View) buildGateway(ctx context.Context, snap *Snapshot, podsIn func(string) ([]*corev1.Pod, error), modelRoutes []*networkingv1alpha1.ModelRoute) error {
	var (
		classes  gwv1.GatewayClassList
		gateways gwv1.GatewayList
		routes   gwv1.HTTPRouteList
		grants   gwv1.ReferenceGrantList
		pools    infv1.InferencePoolList
		services corev1.ServiceList
		spaces   corev1.NamespaceList
	)
	for _, l := range []client.ObjectList{&classes, &gateways, &routes, &grants, &pools, &services, &spaces} {
		if err := v.cache.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
	}
	in := gateway.Input{Services: map[types.NamespacedName]*corev1.Service{}, Bind: v.gw.bind, Certificate: v.gw.certificate, ModelRoutes: modelRoutes}
	nsLabels := make(map[string]map[string]string, len(spaces.Items))
	for i := range spaces.Items {
		nsLabels[spaces.Items[i].Name] = spaces.Items[i].Labels
	}
	in.NamespaceLabels = func(ns string) map[string]string { return nsLabels[ns] }
	var ours []*gwv1.Gateway
	for i := range gateways.Items {
		ours = append(ours, &gateways.Items[i])
	}
	v.gw.certs.Sync(gateway.CertificateRefs(ours))
	for i := range classes.Items {
		in.Classes = append(in.Classes, &classes.Items[i])
	}
	for i := range gateways.Items {
		in.Gateways = append(in.Gateways, &gateways.Items[i])
	}
	for i := range routes.Items {
		in.Routes = append(in.Routes, &routes.Items[i])
	}
	for i := range grants.Items {
		in.Grants = append(in.Grants, &grants.Items[i])
	}
	for i := range services.Items {
		s := &services.Items[i]
		in.Services[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
	}
	add := func(key gateway.BackendKey, s *Server) {
		snap.Backends[key] = s
		for _, e := range s.Endpoints {
			snap.Endpoints[e.Address] = e
		}
	}
	for i := range pools.Items {
		p := &pools.Items[i]
		in.Pools = append(in.Pools, p)
		pods, err := podsIn(p.Namespace)
		if err != nil {
			return err
		}
		add(gateway.BackendKey{Kind: gateway.PoolBackend, NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}}, ResolvePool(p, pods))
	}
	// Service backends: only the ports some route names, from their EndpointSlices.
	for _, hr := range in.Routes {
		for _, ru := range hr.Spec.Rules {
			for _, br := range ru.BackendRefs {
				if (br.Group != nil && *br.Group != "") || (br.Kind != nil && *br.Kind != gateway.ServiceKind) || br.Port == nil {
					continue
				}
				key := gateway.BackendKey{Kind: gateway.ServiceBackend, NamespacedName: types.NamespacedName{Namespace: hr.Namespace, Name: string(br.Name)}, Port: int32(*br.Port)}
				if br.Namespace != nil {
					key.Namespace = string(*br.Namespace)
				}
				svc := in.Services[key.NamespacedName]
				if _, done := snap.Backends[key]; done || svc == nil {
					continue
				}
				var slices discoveryv1.EndpointSliceList
				if err := v.cache.List(ctx, &slices, client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name},
					client.UnsafeDisableDeepCopy); err != nil {
					return err
				}
				add(key, ResolveService(svc, key.Port, slices.Items))
			}
		}
	}
	in.PoolEndpoints = func(key types.NamespacedName) int {
		if s := snap.Backends[gateway.BackendKey{Kind: gateway.PoolBackend, NamespacedName: key}]; s != nil {
			return len(s.Endpoints)
		}
		return 0
	}
	snap.Gateway, snap.GatewayStatus = gateway.Build(in)
	return nil
}

// ResolvePool turns an InferencePool and its namespace's pods into a Server: every Ready
// pod matching spec.selector is an endpoint on each of spec.targetPorts (the Inference
// Extension's model: one engine per port, as with data-parallel ranks).
func ResolvePool(p *infv1.InferencePool, pods []*corev1.Pod) *Server {
	s := &Server{Kind: gateway.InferenceKind, Namespace: p.Namespace, Name: p.Name, Policy: policyOf(nil)}
	set := labels.Set{}
	for k, v := range p.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	if len(set) == 0 {
		return s // the schema requires a selector; an empty one selects nothing here
	}
	sel := labels.SelectorFromSet(set)
	for _, pod := range pods {
		if !sel.Matches(labels.Set(pod.Labels)) || !servable(pod) {
			continue
		}
		for _, tp := range p.Spec.TargetPorts {
			s.Endpoints = append(s.Endpoints, &Endpoint{Namespace: pod.Namespace, Pod: pod.Name, Scheme: "http",
				Address: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(tp.Number)))})
		}
	}
	sort.Slice(s.Endpoints, func(i, j int) bool { return s.Endpoints[i].Address < s.Endpoints[j].Address })
	return s
}

// ResolveService turns one port of a Service into a Server: the ready addresses of its
// EndpointSlices, on the slice port named like the Service port.
func ResolveService(svc *corev1.Service, port int32, slices []discoveryv1.EndpointSlice) *Server {
	s := &Server{Kind: gateway.ServiceKind, Namespace: svc.Namespace, Name: svc.Name + ":" + strconv.Itoa(int(port)), Policy: policyOf(nil)}
	portName := ""
	for _, sp := range svc.Spec.Ports {
		if sp.Port == port {
			portName = sp.Name
		}
	}
	for i := range slices {
		es := &slices[i]
		var target int32
		for _, ep := range es.Ports {
			name := ""
			if ep.Name != nil {
				name = *ep.Name
			}
			if name == portName && ep.Port != nil {
				target = *ep.Port
			}
		}
		if target == 0 {
			continue
		}
		for _, e := range es.Endpoints {
			if (e.Conditions.Ready != nil && !*e.Conditions.Ready) || (e.Conditions.Terminating != nil && *e.Conditions.Terminating) {
				continue
			}
			pod := ""
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				pod = e.TargetRef.Name
			}
			for _, a := range e.Addresses {
				s.Endpoints = append(s.Endpoints, &Endpoint{Namespace: svc.Namespace, Pod: pod, Scheme: "http", Address: net.JoinHostPort(a, strconv.Itoa(int(target)))})
			}
		}
	}
	sort.Slice(s.Endpoints, func(i, j int) bool { return s.Endpoints[i].Address < s.Endpoints[j].Address })
	return s
}
