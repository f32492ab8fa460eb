package tenant

import (
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/pkg/router/ratelimit"
)

func secret(name, tenant, key string, ann map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{APIKeyLabel: "true"}, Annotations: ann}}
	if tenant != "" {
		s.Labels[TenantLabel] = tenant
	}
	if key != "" {
		s.Data = map[string][]byte{KeyField: []byte(key), "other": []byte("x")}
	}
	o, _ := Strip(s)
	return o.(*corev1.Secret)
}

func TestStripKeepsNoKey(t *testing.T) {
	s := secret("a", "t", "sk-secret", nil)
	for f, v := range s.Data {
		if f != hashField || strings.Contains(string(v), "sk-secret") {
			t.Errorf("the cached Secret holds data %q", f)
		}
	}
}

// client-go may hand an object to the transform again: the hash stays.
func TestStripTwice(t *testing.T) {
	once := secret("a", "t", "sk-secret", nil)
	twice, _ := Strip(once)
	var k Keys
	if p := k.Replace([]*corev1.Secret{twice.(*corev1.Secret)}); len(p) != 0 {
		t.Fatalf("problems: %v", p)
	}
	if _, ok := k.Lookup("sk-secret"); !ok {
		t.Error("a Secret stripped twice lost its key")
	}
}

func TestKeys(t *testing.T) {
	var k Keys
	problems := k.Replace([]*corev1.Secret{
		secret("a", "team-a", "key-a", map[string]string{InputTokensAnnotation: "1000", UnitAnnotation: "minute"}),
		secret("a2", "team-a", "key-a2", map[string]string{InputTokensAnnotation: "30"}),
		secret("b", "team-b", "key-b", nil),
		secret("no-tenant", "", "key-x", nil),
		secret("no-key", "team-c", "", nil),
		secret("bad", "team-d", "key-d", map[string]string{OutputTokensAnnotation: "lots"}),
		secret("clash1", "team-e", "same", nil),
		secret("clash2", "team-f", "same", nil),
	})
	want := map[string]string{"ns/no-tenant": TenantLabel, "ns/no-key": KeyField, "ns/bad": OutputTokensAnnotation, "ns/clash2": "team-e"}
	for _, p := range problems {
		if w, ok := want[p.Secret]; !ok || !strings.Contains(p.Reason, w) {
			t.Errorf("problem %s: %s; want one naming %q", p.Secret, p.Reason, w)
		}
		delete(want, p.Secret)
	}
	if len(want) != 0 {
		t.Errorf("problems not reported: %v", want)
	}
	if got, ok := k.Lookup("key-a2"); !ok || got.Name != "team-a" {
		t.Errorf("key-a2: %v %v", got, ok)
	}
	// The strictest of 1000/minute and 30/second, over a second: 16/second.
	if got, _ := k.Lookup("key-a"); got.Limits != (ratelimit.Limits{InputPerUnit: 16, Unit: time.Second}) {
		t.Errorf("team-a limits %+v", got.Limits)
	}
	for _, bad := range []string{"key-x", "key-d", "same", "", "key-a "} {
		if _, ok := k.Lookup(bad); ok {
			t.Errorf("%q was accepted", bad)
		}
	}
	k.Replace(nil)
	if _, ok := k.Lookup("key-b"); ok {
		t.Error("a deleted key was still accepted")
	}
}

func TestPresented(t *testing.T) {
	for _, c := range []struct {
		h         http.Header
		anthropic bool
		key       string
	}{
		{http.Header{"Authorization": {"Bearer k1"}}, false, "k1"},
		{http.Header{"Authorization": {"bearer  k1 "}}, false, "k1"},
		{http.Header{"Authorization": {"Basic k1"}}, false, ""},
		{http.Header{"X-Api-Key": {"k2"}}, false, ""},
		{http.Header{"X-Api-Key": {"k2"}}, true, "k2"},
		{http.Header{"Authorization": {"Bearer "}}, true, ""},
	} {
		if got, found := Presented(c.h, c.anthropic); got != c.key || found != (c.key != "") {
			t.Errorf("%v (anthropic %v): %q %v, want %q", c.h, c.anthropic, got, found, c.key)
		}
	}
}
