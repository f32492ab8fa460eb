package credentials

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

func secret(name string, labelled bool, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{}}
	if labelled {
		s.Labels = map[string]string{networkingv1alpha1.ExternalModelProviderCredentialLabel: "true"}
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// Get says why a credential cannot be used, naming the Secret and key but never the value,
// and follows the Secret's changes.
func TestGet(t *testing.T) {
	kube := fake.NewClientset(
		secret("good", true, map[string]string{"apiKey": "  sk-1\n", "empty": " \n", "split": "sk\r\nX-Evil: 1"}),
		secret("unlabelled", false, map[string]string{"apiKey": "sk-2"}),
	)
	var changes atomic.Int32
	s := New(kube, logr.Discard(), func() { changes.Add(1) })
	defer s.Stop()
	ref := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }
	assert.ErrorContains(t, s.Get(ref("good"), "apiKey").Err, "Secret ns/good is not watched")

	s.Sync(map[types.NamespacedName]bool{ref("good"): true, ref("unlabelled"): true, ref("missing"): true})
	require.Eventually(t, func() bool { return s.Get(ref("good"), "apiKey").Err == nil }, 10*time.Second, 10*time.Millisecond, "%v", s.Get(ref("good"), "apiKey").Err)
	assert.Equal(t, Lookup{Value: "sk-1"}, s.Get(ref("good"), "apiKey"), "trimmed")
	assert.ErrorContains(t, s.Get(ref("good"), "other").Err, `Secret ns/good has no key "other"`)
	assert.ErrorContains(t, s.Get(ref("good"), "empty").Err, `key "empty" is empty`)
	assert.ErrorContains(t, s.Get(ref("good"), "split").Err, "characters an HTTP header cannot carry")
	assert.NotContains(t, s.Get(ref("good"), "split").Err.Error(), "Evil")
	// Each Secret has its own watch: wait until both have listed (an answer before that is
	// "not loaded yet", which says nothing about the Secret).
	loaded := func(name string) bool { return !errors.Is(s.Get(ref(name), "apiKey").Err, ErrNotLoaded) }
	require.Eventually(t, func() bool { return loaded("missing") && loaded("unlabelled") }, 30*time.Second, 10*time.Millisecond)
	notFound := "not found, or not labelled " + networkingv1alpha1.ExternalModelProviderCredentialLabel + "=true"
	assert.ErrorContains(t, s.Get(ref("missing"), "apiKey").Err, notFound)
	assert.ErrorContains(t, s.Get(ref("unlabelled"), "apiKey").Err, notFound, "an unlabelled Secret is never read")
	assert.Positive(t, changes.Load(), "the view is told of what arrives")

	_, err := kube.CoreV1().Secrets("ns").Update(context.Background(), secret("good", true, map[string]string{"apiKey": "sk-rotated"}), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Get(ref("good"), "apiKey").Value == "sk-rotated" }, 10*time.Second, 10*time.Millisecond)

	s.Sync(map[types.NamespacedName]bool{ref("missing"): true})
	assert.ErrorContains(t, s.Get(ref("good"), "apiKey").Err, "not watched", "a Secret no provider names any more is dropped")
}
